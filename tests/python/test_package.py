"""The kiln package as a user meets it: compile, Input specs, save and load (in a fresh process
too), the support report, torch.compile's backend, and the errors for bad input. Run by ctest
(`python_package`) against the package the build assembles in build/python."""
import copy
import os
import subprocess
import sys
import tempfile

import pytest
import torch

import kiln


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean(dim=(2, 3)))


def conv_net():
    torch.manual_seed(0)
    return ConvNet().eval()


def test_compile_matches_eager_and_reports():
    m = conv_net()
    x = torch.randn(2, 3, 16, 16)
    c = kiln.compile(m, inputs=[x])
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), atol=1e-4, rtol=1e-4)
    assert isinstance(c, torch.jit.ScriptModule)
    report = c.kiln_report
    engines = [s for s in report["segments"] if s["target"] == "engine"]
    assert len(engines) == 1 and report["torch_ops"] == 0, report
    assert "aten::_convolution" in engines[0]["ops"] or "aten::conv2d" in engines[0]["ops"]


def test_debug_logs_the_graph_after_each_phase(caplog):
    with caplog.at_level("DEBUG", logger="kiln"):
        kiln.compile(conv_net(), inputs=[torch.randn(1, 3, 8, 8)], debug=True)
    text = caplog.text
    assert "graph(" in text and "aten::" in text, text[:2000]
    assert kiln._kiln.log_level().lower() == "warning"  # restored


def test_dynamic_batch_from_an_input_range():
    m = conv_net()
    spec = kiln.Input(min_shape=(1, 3, 16, 16), opt_shape=(4, 3, 16, 16),
                      max_shape=(8, 3, 16, 16))
    c = kiln.compile(m, inputs=[spec])
    for batch in (1, 3, 8):
        x = torch.randn(batch, 3, 16, 16)
        with torch.no_grad():
            torch.testing.assert_close(c(x), m(x), atol=1e-4, rtol=1e-4)
    with pytest.raises(Exception, match="profile|outside|shape"):
        c(torch.randn(9, 3, 16, 16))


def test_assume_dynamic_shape_support_reaches_the_compiler():
    m = conv_net()
    spec = kiln.Input(min_shape=(1, 3, 16, 16), opt_shape=(4, 3, 16, 16),
                      max_shape=(8, 3, 16, 16))
    c = kiln.compile(m, inputs=[spec], assume_dynamic_shape_support=True)
    engines = [s for s in c.kiln_report["segments"] if s["target"] == "engine"]
    assert len(engines) == 1 and c.kiln_report["torch_ops"] == 0, c.kiln_report
    for batch in (1, 8):
        x = torch.randn(batch, 3, 16, 16)
        with torch.no_grad():
            torch.testing.assert_close(c(x), m(x), atol=1e-4, rtol=1e-4)
    # The C++ spec reads the option (a value that is not a bool is named there).
    with pytest.raises(kiln.InvalidArgument,
                       match="assume_dynamic_shape_support: expected True or False"):
        kiln.compile(m, inputs=[spec], assume_dynamic_shape_support="yes")


def test_exported_program_through_the_aten_frontend(tmp_path):
    m = conv_net()
    batch = torch.export.Dim("batch", min=1, max=8)
    program = torch.export.export(m, (torch.randn(2, 3, 16, 16),), dynamic_shapes=({0: batch},))
    for form in (program, program.run_decompositions()):
        c = kiln.compile(form)  # the export's batch range 1..8 gives the input spec
        report = c.kiln_report
        engines = [s for s in report["segments"] if s["target"] == "engine"]
        assert len(engines) == 1 and report["torch_ops"] == 0, report
        assert engines[0]["input_shapes"] == ["(2,3,16,16)"], report  # opt: the example's batch
        for n in (1, 5, 8):
            x = torch.randn(n, 3, 16, 16)
            with torch.no_grad():
                torch.testing.assert_close(c(x), m(x), atol=1e-4, rtol=1e-4)
        with pytest.raises(Exception, match="profile|outside|shape"):
            c(torch.randn(9, 3, 16, 16))
    # Inputs given win over the export's; the result saves and loads like any compiled module.
    c = kiln.compile(program, ir="exported_program", inputs=[kiln.Input(shape=(3, 3, 16, 16))])
    kiln.save(c, tmp_path / "exported.ts")
    x = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(kiln.load(tmp_path / "exported.ts")(x), m(x), atol=1e-4,
                                   rtol=1e-4)
    with pytest.raises(kiln.InvalidArgument, match="expected a torch.export.ExportedProgram"):
        kiln.compile(m, ir="exported_program", inputs=[x])


# Exports of models with `torch.no_grad()` or autocast turned off in their forward (transformers'
# rotary embeddings, older releases) wrap those blocks in higher-order ops: their subgraphs are
# inlined (nested, with names that repeat the caller's); an enabled autocast region and control
# flow are refused, naming the op.
def test_exported_grad_mode_and_disabled_autocast_blocks_are_inlined():
    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            with torch.no_grad():
                positions = torch.arange(x.shape[1], dtype=torch.float32) * 0.5
                with torch.autocast("cpu", enabled=False):
                    positions = positions.sin()
            with torch.autocast("cpu", enabled=False):
                y = self.lin(x) + positions
            return torch.relu(y) * 2

    torch.manual_seed(0)
    m = Wrapped()
    x = torch.randn(3, 8)
    with torch.enable_grad():  # where grad mode is already off, no_grad() leaves no wrapper
        program = torch.export.export(m, (x,))
    targets = {str(n.target) for n in program.graph.nodes}
    assert {"wrap_with_set_grad_enabled", "wrap_with_autocast"} <= targets, targets
    c = kiln.compile(program)
    report = c.kiln_report
    engines = [s for s in report["segments"] if s["target"] == "engine"]
    assert len(engines) == 1 and report["torch_ops"] == 0, report
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), atol=1e-5, rtol=1e-5)

    class Autocast(torch.nn.Module):
        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return x @ x.t()

    program = torch.export.export(Autocast(), (x,))
    with pytest.raises(kiln.Unsupported, match="autocast region"):
        kiln.compile(program)

    class Branch(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x,))

    program = torch.export.export(Branch(), (x,))
    with pytest.raises(kiln.Unsupported, match="higher_order.cond.*control flow"):
        kiln.compile(program)


def test_script_module_and_precisions_accepted():
    m = torch.jit.script(conv_net())
    x = torch.randn(1, 3, 8, 8)
    c = kiln.compile(m, inputs=[kiln.Input(shape=(1, 3, 8, 8))],
                     enabled_precisions={torch.float32}, min_block_size=1)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), atol=1e-4, rtol=1e-4)


def test_save_and_load_in_a_fresh_process(tmp_path):
    m = conv_net()
    x = torch.randn(1, 3, 8, 8)
    c = kiln.compile(m, inputs=[x])
    path = tmp_path / "net.ts"
    kiln.save(c, path)
    torch.save(x, tmp_path / "x.pt")
    with torch.no_grad():
        torch.save(m(x), tmp_path / "y.pt")
    script = (
        "import sys, torch, kiln\n"
        f"m = kiln.load({str(path)!r})\n"
        f"x = torch.load({str(tmp_path / 'x.pt')!r}); y = torch.load({str(tmp_path / 'y.pt')!r})\n"
        "torch.testing.assert_close(m(x), y, atol=1e-4, rtol=1e-4)\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=dict(os.environ), timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_support_report_names_what_stays_in_pytorch():
    class Lgamma(torch.nn.Module):
        def forward(self, x):
            return torch.lgamma(x) + 1

    report = kiln.support_report(Lgamma().eval(), inputs=[torch.rand(2, 3) + 1])
    assert not report.supported
    assert any("lgamma" in line for line in report.unsupported), report.text
    assert report.as_dict()["supported"] is False
    assert kiln.support_report(conv_net(), inputs=[torch.randn(1, 3, 8, 8)]).supported


def test_fallback_ops_run_in_pytorch():
    class Mixed(torch.nn.Module):
        def forward(self, x):
            return torch.lgamma(torch.relu(x) + 1) * 2 + x

    m = Mixed().eval()
    x = torch.randn(4, 5)
    c = kiln.compile(m, inputs=[x], min_block_size=1)
    torch.testing.assert_close(c(x), m(x), atol=1e-5, rtol=1e-5)
    assert c.kiln_report["torch_ops"] >= 1


def compiled_by_dynamo(model, *args):
    """model(*args) through torch.compile(backend="kiln"), with how many graphs kiln compiled and
    how many it left to PyTorch."""
    torch._dynamo.reset()
    before = dict(kiln.dynamo.stats)
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        out = compiled(*args)
    return out, {k: kiln.dynamo.stats[k] - before[k] for k in before}


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_torch_compile_backend_runs_the_zoo(name):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)().eval()
    x = torch.randn(2, 3, 64, 64)
    out, counts = compiled_by_dynamo(m, x)
    with torch.no_grad():
        torch.testing.assert_close(out, m(x), atol=1e-4, rtol=1e-4)
    assert counts == {"compiled": 1, "in_pytorch": 0}


def test_torch_compile_binds_the_weights_as_constants():
    # Dynamo passes parameters and buffers as graph inputs; kiln binds them, so the batch norm
    # folds into the convolution and the engine's only input is the image.
    m = conv_net()
    x = torch.randn(2, 3, 16, 16)
    torch._dynamo.reset()
    seen = []
    real = kiln._compile.compile

    def spy(module, **kw):
        out = real(module, **kw)
        seen.append(out.kiln_report)
        return out

    kiln._compile.compile = spy
    try:
        out, counts = compiled_by_dynamo(m, x)
    finally:
        kiln._compile.compile = real
    torch.testing.assert_close(out, m(x), atol=1e-4, rtol=1e-4)
    assert counts == {"compiled": 1, "in_pytorch": 0}
    engines = [s for s in seen[0]["segments"] if s["target"] == "engine"]
    assert len(engines) == 1 and len(engines[0]["input_shapes"]) == 1, seen[0]
    assert not any("batch_norm" in op for op in engines[0]["ops"]), engines[0]["ops"]


def test_torch_compile_options_reach_kiln():
    class Mixed(torch.nn.Module):
        def forward(self, x):
            return torch.lgamma(torch.relu(x) + 1) * 2 + x

    m, x = Mixed().eval(), torch.randn(3, 4)
    torch._dynamo.reset()
    fast = torch.compile(m, backend="kiln", options={"min_block_size": 1,
                                                     "torch_executed_ops": ["aten::mul"]})
    torch.testing.assert_close(fast(x), m(x), atol=1e-5, rtol=1e-5)
    torch._dynamo.reset()
    bad = torch.compile(m, backend="kiln", options={"min_blok_size": 1})
    with pytest.raises(Exception, match="min_blok_size"):
        bad(x)


def test_torch_compile_backend_runs_bert():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=100)
    m = transformers.BertModel(config).eval()
    ids = torch.randint(0, 100, (2, 16))
    out, counts = compiled_by_dynamo(m, ids)
    with torch.no_grad():
        torch.testing.assert_close(out.last_hidden_state, m(ids).last_hidden_state, atol=1e-4,
                                   rtol=1e-4)
    assert counts["compiled"] >= 1 and counts["in_pytorch"] == 0, counts


def test_exported_head_splits_keep_their_static_dims():
    # export writes `h.view(x.size(0), x.size(1), -1, 4)` with sizes read off x, not h: the
    # reader reads them off h (the same symbols), so the converter infers the -1 while building
    # and the dynamic engine has the static one's layers (no shape arithmetic at run time).
    class HeadSplit(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, x):
            h = self.lin(x)
            heads = h.view(x.size(0), x.size(1), -1, 4).transpose(1, 2)
            return heads.softmax(-1).sum(1)

    m = HeadSplit().eval()
    x = torch.randn(2, 8, 16)
    batch, seq = torch.export.Dim("batch", min=1, max=4), torch.export.Dim("seq", min=2, max=16)
    dynamic = kiln.compile(torch.export.export(m, (x,), dynamic_shapes=({0: batch, 1: seq},)))
    static = kiln.compile(torch.export.export(m, (x,)))
    layers = [sum(s.get("layers", 0) for s in c.kiln_report["segments"] if s["target"] == "engine")
              for c in (dynamic, static)]
    assert layers[0] == layers[1], layers
    for shape in ((1, 2, 16), (3, 11, 16), (4, 16, 16)):
        y = torch.randn(shape)
        with torch.no_grad():
            torch.testing.assert_close(dynamic(y), m(y), atol=1e-5, rtol=1e-5)


def transformers_family(transformers, family):
    """A small model of one transformers family (random weights from its config) called as users
    call it, with token ids and a padding attention mask (vision: pixel values), returning the
    last hidden state; and its example inputs."""
    T = transformers
    text = {
        "bert": lambda: T.BertModel(T.BertConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            vocab_size=100, max_position_embeddings=64), add_pooling_layer=False),
        "distilbert": lambda: T.DistilBertModel(T.DistilBertConfig(
            dim=64, n_layers=2, n_heads=4, hidden_dim=128, vocab_size=100,
            max_position_embeddings=64)),
        "gpt2": lambda: T.GPT2Model(T.GPT2Config(vocab_size=100, n_embd=64, n_layer=2, n_head=4,
                                                 n_positions=64)),
        "clip_text": lambda: T.CLIPTextModel(T.CLIPTextConfig(
            vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=64)),
        # Rotary embeddings, RMS norm, SwiGLU, grouped-query attention (4 heads, 2 kv heads).
        "llama": lambda: T.LlamaModel(T.LlamaConfig(
            vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)),
    }
    if family == "vit":
        vit = T.ViTModel(T.ViTConfig(image_size=32, patch_size=8, hidden_size=64,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128), add_pooling_layer=False).eval()

        class Vision(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = vit

            def forward(self, pixels):
                return self.model(pixel_values=pixels, return_dict=False)[0]

        return Vision().eval(), (torch.randn(2, 3, 32, 32),)
    model = text[family]().eval()

    class Text(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids, attention_mask):
            return self.model(input_ids=ids, attention_mask=attention_mask, return_dict=False)[0]

    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 11:] = 0  # the second sequence is padded
    return Text().eval(), (torch.randint(0, 100, (2, 16)), mask)


# Issue #29 item 4: every op the transformers families trace or export to runs in the engine.
@pytest.mark.parametrize("frontend", ["trace", "export"])
@pytest.mark.parametrize("family", ["bert", "distilbert", "gpt2", "clip_text", "llama", "vit"])
def test_transformers_families_compile_into_one_engine(family, frontend):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    m, args = transformers_family(transformers, family)
    with torch.no_grad():
        source = (torch.export.export(m, args) if frontend == "export"
                  else torch.jit.trace(m, args, check_trace=False))
    c = kiln.compile(source, inputs=list(args), progress=False)
    report = c.kiln_report
    engines = [s for s in report["segments"] if s["target"] == "engine"]
    assert len(engines) == 1 and report["torch_ops"] == 0, report["fallback"]
    if family != "vit":
        # The head splits and merges fold into the attention with the padding mask (and GPT-2's,
        # CLIP's and Llama's causal one, a flag then; Llama's rotary embeddings computed on the
        # unpermuted heads, its key/value heads read unrepeated): no shuffle moves data.
        assert engines[0]["shuffles"] == 0, engines[0]
    with torch.no_grad():
        torch.testing.assert_close(c(*args), m(*args), atol=1e-5, rtol=1e-4)


# Issues #29/#30: the text families with a padding mask, exported with a dynamic batch and
# sequence (Dim.DYNAMIC: Llama's export refuses a bounded sequence Dim on a guard of its own), the
# ranges given to kiln: one engine answering as eager at min, between, max and opt; a longer
# sequence is refused.
@pytest.mark.parametrize("family", ["bert", "distilbert", "gpt2", "clip_text", "llama"])
def test_transformers_families_with_a_dynamic_batch_and_sequence(family):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    m, args = transformers_family(transformers, family)
    dyn = torch.export.Dim.DYNAMIC
    program = torch.export.export(m, args, dynamic_shapes=({0: dyn, 1: dyn}, {0: dyn, 1: dyn}))
    spec = kiln.Input(min_shape=(1, 2), opt_shape=(2, 16), max_shape=(4, 32), dtype=torch.long)
    c = kiln.compile(program, inputs=[spec, spec], progress=False)
    report = c.kiln_report
    engines = [s for s in report["segments"] if s["target"] == "engine"]
    assert len(engines) == 1 and report["torch_ops"] == 0, report["fallback"]
    for shape in ((1, 2), (3, 17), (4, 32), (2, 16)):
        ids = torch.randint(0, 100, shape)
        mask = torch.ones(shape, dtype=torch.long)
        mask[0, shape[1] // 2 + 1:] = 0
        with torch.no_grad():
            torch.testing.assert_close(c(ids, mask), m(ids, mask), atol=1e-5, rtol=1e-4)
    longer = torch.ones(2, 33, dtype=torch.long)
    with pytest.raises(Exception, match="profile|outside|shape"):
        c(longer, longer)


# Issue #29 item 2: RMS norm, as torch's op (nn.RMSNorm) and written out as transformers' Llama
# writes it (casts to f32, pow, mean, rsqrt, the weight), by trace and by export: one layer
# (an RMS normalization) with the weight as its scale.
@pytest.mark.parametrize("frontend", ["trace", "export"])
@pytest.mark.parametrize("form", ["op", "explicit"])
def test_rms_norm_is_one_layer(form, frontend):
    class Explicit(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.rand(32) + 0.5)

        def forward(self, x):
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            return self.weight * h.to(x.dtype)

    torch.manual_seed(0)
    m = (torch.nn.RMSNorm(32, eps=1e-6) if form == "op" else Explicit()).eval()
    if form == "op":
        with torch.no_grad():
            m.weight.copy_(torch.rand(32) + 0.5)
    x = torch.randn(2, 7, 32) * 3
    with torch.no_grad():
        source = torch.export.export(m, (x,)) if frontend == "export" else torch.jit.trace(m, x)
    c = kiln.compile(source, inputs=[x], min_block_size=1, progress=False)
    report = c.kiln_report
    engines = [s for s in report["segments"] if s["target"] == "engine"]
    assert len(engines) == 1 and report["torch_ops"] == 0, report
    assert engines[0]["layers"] == 2, engines[0]  # the weight's constant and the norm
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), atol=1e-5, rtol=1e-5)


def test_float64_results_keep_their_dtype():
    # The engine computes in at most f32; what torch gives in double comes back as double.
    class ToDouble(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x).double() + torch.softmax(x, -1, dtype=torch.float64)

    m = ToDouble().eval()
    x = torch.randn(2, 5)
    c = kiln.compile(m, inputs=[x], min_block_size=1)
    assert c.kiln_report["torch_ops"] == 0, c.kiln_report
    got = c(x)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, m(x), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bags_run_in_the_engine(mode):
    # nn.EmbeddingBag (recommendation models): bags from 2-d input and from offsets, an empty
    # bag and one of only padding (0 for mean and max, as torch), one engine.
    torch.manual_seed(0)
    m = torch.nn.EmbeddingBag(20, 8, mode=mode, padding_idx=3).eval()
    rows = torch.randint(0, 20, (4, 5))
    rows[1] = 3
    for args in [(rows,), (torch.randint(0, 20, (9,)), torch.tensor([0, 3, 3, 7]))]:
        c = kiln.compile(torch.jit.trace(m, args), inputs=list(args))
        assert c.kiln_report["torch_ops"] == 0, c.kiln_report
        with torch.no_grad():
            torch.testing.assert_close(c(*args), m(*args), atol=1e-6, rtol=1e-5)


def test_tuple_outputs_are_not_ops_left_in_pytorch():
    # Packing the outputs into the tuple forward returns computes nothing: not a fallback.
    class Pair(torch.nn.Module):
        def forward(self, x):
            values, indices = torch.topk(torch.relu(x), 2)
            return values * 2, indices

    m = Pair().eval()
    x = torch.rand(3, 6) + 0.1  # positive: no ties among the top 2 after the relu
    c = kiln.compile(m, inputs=[x], min_block_size=1)
    report = c.kiln_report
    assert report["torch_ops"] == 0 and report["fallback"] == [], report
    for got, want in zip(c(x), m(x)):
        torch.testing.assert_close(got, want)


def test_ops_that_fail_on_generated_data_do_not_stop_a_compile():
    # Shape analysis runs PyTorch segments on generated inputs only where an engine needs their
    # shapes: cholesky of a random (not positive definite) matrix fails, but its result goes
    # straight to the output, so the compile goes on and the user's matrix runs.
    class Mixed(torch.nn.Module):
        def forward(self, x):
            return torch.linalg.cholesky(x), torch.relu(x) * 2

    m = Mixed().eval()
    a = torch.randn(4, 4)
    spd = a @ a.T + 4 * torch.eye(4)
    traced = torch.jit.trace(m, spd)  # shape analysis then generates its own (random) matrix
    c = kiln.compile(traced, inputs=[kiln.Input(shape=(4, 4))], min_block_size=1)
    engines = [s for s in c.kiln_report["segments"] if s["target"] == "engine"]
    assert len(engines) == 1, c.kiln_report
    for got, want in zip(c(spd), m(spd)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_bad_input_is_a_clear_exception(tmp_path):
    m = conv_net()
    x = torch.randn(1, 3, 8, 8)
    with pytest.raises(kiln.InvalidArgument, match="float64"):
        kiln.compile(m, inputs=[x], enabled_precisions={torch.float64})
    with pytest.raises(kiln.InvalidArgument, match="f7"):
        kiln.compile(m, inputs=[x], enabled_precisions={"f7"})
    with pytest.raises(ValueError, match="min <= opt <= max"):
        kiln.Input(min_shape=(2, 3), opt_shape=(1, 3), max_shape=(4, 3))
    with pytest.raises(kiln.InvalidArgument, match="unknown option.*no_such_flag"):
        kiln.compile(m, inputs=[x], no_such_flag=True)
    with pytest.raises(kiln.InvalidArgument, match="min_block_size: expected an integer of at least 1"):
        kiln.compile(m, inputs=[x], min_block_size=-2)
    with pytest.raises(kiln.InvalidArgument, match="require_full_compilation: expected True"):
        kiln.compile(m, inputs=[x], require_full_compilation="yes")
    with pytest.raises(kiln.InvalidArgument, match="torch_executed_ops: expected a list"):
        kiln.compile(m, inputs=[x], torch_executed_ops="aten::relu")
    with pytest.raises(kiln.InvalidArgument, match="switch `gemm_fold=maybe`"):
        kiln.compile(m, inputs=[x], switches=["gemm_fold=maybe"])
    with pytest.raises(kiln.InvalidArgument, match="training mode"):
        kiln.compile(ConvNet().train(), inputs=[x])
    with pytest.raises(kiln.Error, match="cuda:7|device"):
        kiln.compile(m, inputs=[x], device="cuda:7")
    with pytest.raises(kiln.Error, match="npu|device"):
        kiln.compile(m, inputs=[x], device="npu")

    class Untraceable(torch.nn.Module):  # a traced forward must return tensors
        def forward(self, x):
            return int(x.shape[0])

    with pytest.raises(kiln.Unsupported, match="could not trace Untraceable"):
        kiln.compile(Untraceable().eval(), inputs=[x])
    with pytest.raises(kiln.Error):  # a wrong number of inputs for the module
        kiln.compile(torch.jit.script(m), inputs=[x, x])
    # Nothing half-written: a failed save leaves no file behind.
    before = set(os.listdir(tmp_path))
    with pytest.raises(kiln.InvalidArgument):
        kiln.save(m, tmp_path / "not_compiled.ts")
    assert set(os.listdir(tmp_path)) == before
    bad = tmp_path / "corrupt.ts"
    bad.write_bytes(b"not a module")
    with pytest.raises(kiln.CorruptInput, match="corrupt.ts"):
        kiln.load(bad)


@pytest.mark.parametrize("script,args", [
    ("resnet50.py", ["--size", "64", "--runs", "3"]),
    ("bert.py", ["--layers", "2", "--hidden", "64", "--seq", "16", "--runs", "3"]),
])
def test_examples_run_on_small_inputs(script, args):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-W", "ignore", os.path.join(root, "examples", script),
                          *args], capture_output=True, text=True, env=dict(os.environ),
                         timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "max |kiln - eager|" in out.stdout and "median ms" in out.stdout, out.stdout


def test_compiler_warnings_reach_pythons_logging(caplog):
    # At level info the compiler logs its phases; they arrive as records of the "kiln" logger.
    with caplog.at_level("INFO", logger="kiln"):
        kiln.set_log_level("info")
        try:
            kiln.compile(conv_net(), inputs=[torch.randn(1, 3, 8, 8)])
        finally:
            kiln.set_log_level("warning")
    assert any(r.name == "kiln" and r.levelname == "INFO" for r in caplog.records), caplog.text


def _tuned(model, seed):
    """A copy of `model` with new weights, as a fine-tune leaves them."""
    tuned = copy.deepcopy(model)
    torch.manual_seed(seed)
    with torch.no_grad():
        for t in list(tuned.parameters()) + [b for b in tuned.buffers() if b.is_floating_point()]:
            t.mul_(torch.rand_like(t) * 0.4 + 0.8)
    return tuned


def test_refit_gives_a_compiled_model_new_weights_without_a_rebuild():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(2, 3, 64, 64)
    tuned = _tuned(model, 1)
    for compiled, new in ((kiln.compile(model, inputs=[x], refittable=True), tuned),
                          (kiln.compile(torch.export.export(model, (x,)), refittable=True),
                           torch.export.export(tuned, (x,)))):
        refitted = kiln.refit(compiled, new)
        assert [s["plan"] for s in refitted.kiln_report["segments"]] == ["refit"]
        with torch.no_grad():
            torch.testing.assert_close(refitted(x), tuned(x), atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    # A saved compiled module refits after loading.
    with tempfile.TemporaryDirectory() as d:
        kiln.save(kiln.compile(model, inputs=[x], refittable=True), os.path.join(d, "m.ts"))
        refitted = kiln.refit(kiln.load(os.path.join(d, "m.ts")), tuned)
        with torch.no_grad():
            torch.testing.assert_close(refitted(x), tuned(x), atol=1e-4, rtol=1e-4)


def test_refit_refuses_what_does_not_fit():
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(1, 3, 64, 64)
    compiled = kiln.compile(model, inputs=[x], refittable=True)
    with pytest.raises(kiln.InvalidArgument, match=r"fc\.weight.*\[7, 512\].*\[10, 512\]"):
        kiln.refit(compiled, torchvision.models.resnet18(num_classes=7).eval())
    with pytest.raises(kiln.InvalidArgument, match="state dict"):
        kiln.refit(compiled, model.state_dict())
    with pytest.raises(kiln.InvalidArgument, match="kiln.compile made"):
        kiln.refit(model, model)
    with pytest.raises(kiln.Unsupported, match="without refittable"):
        kiln.refit(kiln.compile(model, inputs=[x]), model)


def test_the_engine_cache_serves_a_second_compile(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(1, 3, 64, 64)
    first = kiln.compile(model, inputs=[x], refittable=True, engine_cache_dir=tmp_path)
    second = kiln.compile(model, inputs=[x], refittable=True, engine_cache_dir=tmp_path)
    assert [s["plan"] for s in first.kiln_report["segments"]] == ["cache miss"]
    assert [s["plan"] for s in second.kiln_report["segments"]] == ["cache hit"]
    assert second.kiln_report["segments"][0]["build_saved_ms"] > 0
    # The same model again is the whole compiled module from the cache (traced again, so its
    # classes' names are mangled: the key does not see that).
    assert [p["phase"] for p in second.kiln_report["phases"]] == ["module key", "cached load"]
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".kmod", ".kplan"]
    with torch.no_grad():
        torch.testing.assert_close(second(x), model(x), atol=1e-4, rtol=1e-4)
    # New weights miss the compiled module and hit the weightless plan.
    with torch.no_grad():
        model.fc.weight.mul_(0.5)
    third = kiln.compile(model, inputs=[x], refittable=True, engine_cache_dir=tmp_path)
    assert [p["phase"] for p in third.kiln_report["phases"]][:2] == ["module key", "lower"]
    assert [s["plan"] for s in third.kiln_report["segments"]] == ["cache hit"]
    with torch.no_grad():
        torch.testing.assert_close(third(x), model(x), atol=1e-4, rtol=1e-4)
    with pytest.raises(kiln.InvalidArgument, match="engine_cache_size"):
        kiln.compile(model, inputs=[x], engine_cache=True, engine_cache_size=0)


def test_modules_cross_as_bytes_where_torch_types_are_not_shared(monkeypatch):
    # _kiln takes and gives torch._C.ScriptModule objects when it shares torch's pybind11 types,
    # torch.jit.save bytes otherwise: the package works either way.
    monkeypatch.setattr(kiln._kiln, "shares_torch_types", lambda: False)
    m = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    x = torch.randn(2, 8)
    c = kiln.compile(m, inputs=[x], refittable=True)
    r = kiln.refit(c, m)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x))
        torch.testing.assert_close(r(x), m(x))


def test_backend_support_map_sends_unlisted_ops_to_pytorch():
    m = conv_net()
    x = torch.randn(2, 3, 16, 16)
    c = kiln.compile(m, inputs=[x], min_block_size=1, backend_priority=["cpu"],
                     backend_support_map={"cpu": {torch.ops.aten.conv2d, "aten::batch_norm",
                                                  torch.ops.aten.relu.default}})
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), atol=1e-5, rtol=1e-5)
    segments = c.kiln_report["segments"]
    assert [s["device"] for s in segments] == ["cpu"] * len(segments)
    assert any("not in backend_support_map" in s.get("fallback_reason", "") for s in segments)
    assert segments[0]["target"] == "engine"
    for bad, message in [({"backend_priority": "cpu"}, "expected a list of backends"),
                         ({"backend_priority": ["tpu"]}, "unknown backend `tpu`"),
                         ({"backend_priority": ["cpu"], "backend_support_map": {"cpu": [1]}},
                          "expected op names or torch.ops overloads, got 1"),
                         ({"backend_support_map": ["cpu"]}, "expected a dict")]:
        with pytest.raises(kiln.InvalidArgument, match=message):
            kiln.compile(m, inputs=[x], **bad)


class ReluMul(torch.nn.Module):
    """neg -> relu -> mul(weight), twice: a weight budget of 1.5 weights cuts the second chain."""

    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.rand(4096) + 0.5)
        self.w2 = torch.nn.Parameter(torch.rand(4096) + 0.5)

    def forward(self, x):
        y = torch.relu(torch.neg(x)) * self.w1
        return torch.relu(torch.neg(y)) * self.w2


def test_resource_partitioning_keeps_registered_patterns_whole():
    m = ReluMul().eval()
    x = torch.randn(8, 4096)
    budget = int(1.5 * 4096 * 4 * kiln._kiln.BUILD_MEMORY_MULTIPLIER)

    def engines():
        c = kiln.compile(m, inputs=[x], min_block_size=1, enable_resource_partitioning=True,
                         cpu_memory_budget=budget)
        with torch.no_grad():
            torch.testing.assert_close(c(x), m(x))
        return [s["ops"] for s in c.kiln_report["segments"] if s["target"] == "engine"]

    # Without a pattern the cut falls just before the second mul, whose weight overflows.
    assert engines()[1] == ["aten::mul"]

    @kiln.register_atomic_subgraph(name="relu_mul_test")
    class Pattern(torch.nn.Module):
        def forward(self, x, w):
            return torch.relu(x) * w

    # The relu -> mul pattern moves whole to the later piece.
    assert engines()[1] == ["aten::relu", "aten::mul"]
    kiln.register_atomic_subgraph([torch.ops.aten.sub, ["aten::tanh", torch.ops.aten.sigmoid]],
                                  name="sub_act_test")
    for bad, message in [((["aten::relu"],), "at least two ops, got 1"),
                         (("aten::relu",), "expected a list of ops or an nn.Module class"),
                         ((["relu", "aten::mul"],), "`relu` is not an op name")]:
        with pytest.raises(kiln.InvalidArgument, match=message):
            kiln.register_atomic_subgraph(*bad, name="bad")
    with pytest.raises(kiln.InvalidArgument, match="needs a name="):
        kiln.register_atomic_subgraph(["aten::relu", "aten::mul"])
