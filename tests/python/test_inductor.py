"""Inductor as the backend of what kiln's engines leave (backend_priority=[..., "inductor"]):
the split between kiln and Inductor, its answers, its report, torch.compile's backend with it,
and the errors for options that cannot work."""
import logging

import pytest
import torch

import kiln

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


class Special(torch.nn.Module):
    """Convolutions around a chain of three ops (the Laguerre, Chebyshev and Hermite polynomials
    of constant degrees), which the tests keep out of kiln's engines as a user would
    (torch_executed_ops=POLYNOMIALS), so that Inductor gets them."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        p = torch.special.laguerre_polynomial_l(y * 0.1, 2)
        y = torch.special.hermite_polynomial_h(torch.special.chebyshev_polynomial_t(p, 3), 2) * 0.5 + y
        y = torch.relu(self.conv2(y))
        return self.fc(y.mean((2, 3))), y.sum()


# The ops of Special's chain, forced to PyTorch: with "inductor" last in backend_priority, what
# kiln leaves to PyTorch goes to Inductor.
POLYNOMIALS = ["aten::special_laguerre_polynomial_l", "aten::special_chebyshev_polynomial_t",
               "aten::special_hermite_polynomial_h"]
TO_INDUCTOR = {"backend_priority": ["cpu", "inductor"], "torch_executed_ops": POLYNOMIALS}


def special():
    torch.manual_seed(0)
    return Special().eval()


def backends(compiled):
    return [p["backend"] for p in compiled.kiln_report["pieces"]]


def assert_matches_on(compiled, model, x):
    """`compiled` (for cuda) against the CPU model, within the GPU's TF32 tolerance."""
    with torch.no_grad():
        expected = model(x)
    got = compiled(x.cuda())
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.cpu(), e, atol=2e-3, rtol=2e-3)


def assert_matches(compiled, model, x):
    with torch.no_grad():
        expected = model(x)
    got = compiled(x)
    assert isinstance(got, tuple) and len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def split():
    x = torch.randn(2, 3, 16, 16)
    return kiln.compile(special(), inputs=[x], **TO_INDUCTOR), x


def test_inductor_compiles_what_kiln_does_not(split):
    compiled, x = split
    assert isinstance(compiled, kiln.KilnInductorModule)
    assert backends(compiled) == ["kiln", "inductor", "kiln"], compiled.kiln_summary
    pieces = compiled.kiln_report["pieces"]
    # The first engine takes conv, batch norm, relu and the mul feeding the polynomials, the
    # second the mul and add after them, conv2, relu and the rest; Inductor the three between.
    assert pieces[1]["ops"] == 3, compiled.kiln_summary
    assert "inductor (3 ops): aten::special_chebyshev_polynomial_t.n_scalar, " \
        "aten::special_hermite_polynomial_h.n_scalar, " \
        "aten::special_laguerre_polynomial_l.n_scalar" in compiled.kiln_summary
    for p in (pieces[0], pieces[2]):
        engines = [s for s in p["kiln_report"]["segments"] if s["target"] == "engine"]
        assert len(engines) == 1 and p["kiln_report"]["torch_ops"] == 0, p
    # kiln's pieces hold their weights as constants: they take the activations only (x; then
    # relu's output and the polynomials').
    for i, activations in ((0, 1), (2, 2)):
        inputs = list(compiled.pieces[i].module.graph.inputs())[1:]  # after self
        assert len(inputs) == activations, (i, inputs)
    assert compiled.kiln_report["ops"]["kiln"] == pieces[0]["ops"] + pieces[2]["ops"]
    assert_matches(compiled, special(), x)
    assert_matches(compiled, special(), torch.randn(2, 3, 16, 16))


def test_the_users_model_is_left_as_it_was(split):
    # The fixture compiled special(); a model compiled now keeps its weights' state.
    model = special()
    kiln.compile(model, inputs=[torch.randn(2, 3, 16, 16)], **TO_INDUCTOR)
    assert all(p.requires_grad and p.device.type == "cpu" for p in model.parameters())
    assert model.training is False


def test_the_split_module_checks_its_inputs(split):
    compiled, _ = split
    with pytest.raises(kiln.ShapeMismatch, match=r"input 0: compiled for \[2, 3, 16, 16\]"):
        compiled(torch.randn(3, 3, 16, 16))
    with pytest.raises(kiln.InvalidArgument, match="takes 1 tensor argument"):
        compiled(torch.randn(2, 3, 16, 16), torch.randn(1))


def test_a_model_the_engines_take_whole_stays_a_script_module():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(),
                                torch.nn.Conv2d(4, 4, 3), torch.nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    compiled = kiln.compile(model, inputs=[x], backend_priority=["cpu", "inductor"])
    assert isinstance(compiled, torch.jit.ScriptModule)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)


def test_ops_too_few_for_a_piece_of_their_own_stay_with_kiln():
    # One op kiln does not convert between convolutions: fewer than min_block_size (3), so kiln
    # runs it in PyTorch within its module, which saves like any other.
    class One(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(3, 4, 3)
            self.b = torch.nn.Conv2d(4, 4, 3)
            self.c = torch.nn.Conv2d(4, 4, 3)

        def forward(self, x):
            y = torch.relu(self.b(torch.lgamma(torch.relu(self.a(x)) + 1)))
            return torch.relu(self.c(y))

    torch.manual_seed(0)
    model = One().eval()
    x = torch.randn(1, 3, 14, 14)
    compiled = kiln.compile(model, inputs=[x], backend_priority=["cpu", "inductor"])
    assert isinstance(compiled, torch.jit.ScriptModule), compiled.kiln_summary
    assert compiled.kiln_report["torch_ops"] == 1, compiled.kiln_summary
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    # min_block_size=1 gives it to Inductor.
    split = kiln.compile(model, inputs=[x], backend_priority=["cpu", "inductor"],
                         min_block_size=1)
    assert backends(split) == ["kiln", "inductor", "kiln"], split.kiln_summary


def test_exported_programs_and_a_support_map_split_the_same_way():
    model = special()
    x = torch.randn(2, 3, 16, 16)
    program = torch.export.export(model, (x,))
    # Only convolutions in kiln's engine: everything between them goes to Inductor.
    compiled = kiln.compile(program, backend_priority=["cpu", "inductor"],
                            backend_support_map={"cpu": {torch.ops.aten.conv2d.default}},
                            min_block_size=1)
    assert backends(compiled) == ["kiln", "inductor", "kiln", "inductor"], compiled.kiln_summary
    assert compiled.kiln_report["ops"]["kiln"] == 2, compiled.kiln_summary
    assert_matches(compiled, model, x)


def test_torch_compile_with_inductor_in_backend_priority():
    model = special()
    x = torch.randn(2, 3, 16, 16)
    before = kiln._dynamo.stats["compiled"]
    with torch.no_grad():
        compiled = torch.compile(model, backend="kiln", options=TO_INDUCTOR)
        got = compiled(x)
        expected = model(x)
    assert kiln._dynamo.stats["compiled"] == before + 1
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


def test_a_piece_inductor_cannot_compile_runs_in_pytorch(monkeypatch, caplog):
    def fail(gm, example_inputs, options=None):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch._inductor, "compile", fail)
    model = special()
    x = torch.randn(2, 3, 16, 16)
    with caplog.at_level(logging.WARNING, logger="kiln"):
        compiled = kiln.compile(model, inputs=[x], **TO_INDUCTOR)
    assert backends(compiled) == ["kiln", "pytorch", "kiln"], compiled.kiln_summary
    assert "Inductor could not compile piece 1 (3 ops)" in caplog.text
    assert "no C++ compiler" in caplog.text
    assert_matches(compiled, model, x)


def test_options_inductor_cannot_take_are_clear_errors():
    model = special()
    x = torch.randn(2, 3, 16, 16)
    with pytest.raises(kiln.InvalidArgument, match="comes last"):
        kiln.compile(model, inputs=[x], backend_priority=["inductor", "cpu"])
    with pytest.raises(kiln.InvalidArgument, match="expected a list of backends"):
        kiln.compile(model, inputs=[x], backend_priority="inductor")
    with pytest.raises(kiln.InvalidArgument, match="name kiln's engine before it"):
        kiln.compile(model, inputs=[x], backend_priority=["inductor"])
    with pytest.raises(kiln.InvalidArgument, match="give it no entry"):
        kiln.compile(model, inputs=[x], backend_priority=["cpu", "inductor"],
                     backend_support_map={"inductor": ["aten::lgamma"]})
    with pytest.raises(kiln.InvalidArgument, match="not TorchScript"):
        kiln.compile(torch.jit.trace(model, x), inputs=[x], backend_priority=["cpu", "inductor"])
    with pytest.raises(kiln.InvalidArgument, match="give static shapes"):
        kiln.compile(model, inputs=[kiln.Input(min_shape=(1, 3, 16, 16), opt_shape=(2, 3, 16, 16),
                                               max_shape=(4, 3, 16, 16))],
                     backend_priority=["cpu", "inductor"])
    with pytest.raises(kiln.InvalidArgument, match="unknown backend `tpu`"):
        kiln.compile(model, inputs=[x], backend_priority=["tpu", "inductor"])
    program = torch.export.export(model, (x,))
    program.example_inputs = None  # as a program may come without them
    with pytest.raises(kiln.InvalidArgument, match="keeps no example tensors"):
        kiln.compile(program, backend_priority=["cpu", "inductor"])
    split = kiln.compile(model, inputs=[x], **TO_INDUCTOR)
    with pytest.raises(kiln.InvalidArgument, match="Inductor"):
        kiln.save(split, "/tmp/unused.ts")


@cuda
def test_cuda_pieces_of_a_model_on_the_cpu_leave_its_weights_there():
    model = special()
    x = torch.randn(2, 3, 16, 16)
    compiled = kiln.compile(model, inputs=[x], device="cuda", backend_priority=["cuda", "inductor"],
                            torch_executed_ops=POLYNOMIALS)
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert_matches_on(compiled, model, x)


@cuda
def test_cuda_cpu_and_inductor_in_one_model():
    model = special().cuda()
    x = torch.randn(2, 3, 16, 16, device="cuda")
    compiled = kiln.compile(model, inputs=[x], backend_priority=["cuda", "cpu", "inductor"],
                            backend_support_map={"cuda": {"aten::conv2d"},
                                                 "cpu": {"aten::relu", "aten::batch_norm"}},
                            min_block_size=1)
    assert "inductor" in backends(compiled), compiled.kiln_summary
    devices = {s.get("device") for p in compiled.kiln_report["pieces"] if p["backend"] == "kiln"
               for s in p["kiln_report"]["segments"] if s["target"] == "engine"}
    assert {"cpu", "cuda:0"} <= devices, compiled.kiln_summary
    with torch.no_grad():
        expected = model(x)
    for g, e in zip(compiled(x), expected):
        torch.testing.assert_close(g, e, atol=1e-3, rtol=1e-3)
