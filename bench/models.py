"""The benchmarks' models, shared by bench/gpu/bench.py and bench/cpu_models/peers.py.

make_model(name[, mask, seq]) returns (module in eval mode, make_input(batch)). Names: any torchvision
classification constructor (224x224 images), "bert" (a BERT-base-sized nn.TransformerEncoder),
"hf_bert", "hf_gpt2", "hf_distilbert", "hf_vit", "hf_clip_text" and "hf_llama" (transformers'
BertModel, GPT2Model, DistilBertModel, ViTModel and CLIPTextModel at base size and a small
LlamaModel (hidden 512, 8 layers, 8 heads in 2 key/value groups, SwiGLU, RMS norm, rotary), random
weights from their configs; sequence length 128 (`seq`: another, for the models of token ids
but CLIP), CLIP's 77, ViT's 224x224 images; the module
returns the last hidden state; with mask=True the text models also take an attention mask of a
padded batch), "fcn_resnet50" (torchvision segmentation, 224x224, returning its
"out" map), "r3d_18" (torchvision video, 16 frames of 112x112), and FALLBACK's models.

SUITE is the broad GPU suite of issue #28: every torchvision classification family, a
segmentation and a video model, and the transformers models, each compiled as a user would.
"""
import statistics
import time

import torch
import torch.nn as nn

SEQ = 128


class Bert(nn.Module):
    """A BERT-base-sized encoder from torch.nn: 12 layers, hidden 768, 12 heads."""

    def __init__(self, vocab=30522, d=768, heads=12, layers=12, seq=SEQ):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        self.norm = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.0,
                                           activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, ids):
        return self.encoder(self.norm(self.tok(ids) + self.pos))


class LastHiddenState(nn.Module):
    """A transformers model called with token ids (or, for vision models, pixel values), and an
    attention mask where given, returning its last hidden state (a plain tensor, so every backend
    can trace or export it)."""

    def __init__(self, model, argument="input_ids"):
        super().__init__()
        self.model = model
        self.argument = argument

    def forward(self, x, attention_mask=None):
        kwargs = {self.argument: x}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        return self.model(**kwargs, return_dict=False)[0]


def padded_batch(vocab, batch, seq):
    """Token ids and the attention mask of a padded batch, as a tokenizer gives them: sequence 0
    full, the others 1/2 to all of `seq` long (right padding: ones, then zeros)."""
    ids = torch.randint(0, vocab, (batch, seq))
    lengths = torch.randint(seq // 2, seq + 1, (batch,))
    lengths[0] = seq
    mask = (torch.arange(seq).unsqueeze(0) < lengths.unsqueeze(1)).long()
    return ids, mask


SUITE = [
    "resnet18", "resnet50", "resnet101", "resnext50_32x4d", "wide_resnet50_2",
    "densenet121", "vgg16", "googlenet", "inception_v3",
    "mobilenet_v2", "mobilenet_v3_large", "mnasnet1_0", "shufflenet_v2_x1_0", "squeezenet1_1",
    "efficientnet_b0", "efficientnet_b3", "efficientnet_v2_s",
    "regnet_y_1_6gf", "regnet_x_3_2gf", "convnext_tiny", "vit_b_16", "swin_t", "maxvit_t",
    "fcn_resnet50", "r3d_18",
    "mobilenet_v3_small", "convnext_small",
    "bert", "hf_bert", "hf_gpt2", "hf_distilbert", "hf_vit", "hf_clip_text", "hf_llama",
]
TRANSFORMERS = ["hf_bert", "hf_gpt2", "hf_distilbert", "hf_vit", "hf_clip_text", "hf_llama"]


# Models with ops kiln's engines did not convert, which run in PyTorch or, with backend_priority
# [..., "inductor"], in Inductor (issue #34): "gcnn_lm", a gated convolutional language model
# (Dauphin et al. 2017: 8 residual blocks of causal conv1d and GLU, vocabulary 10000, width 512,
# sequence length 128; GLU is decomposed since session 26, so it is one engine now), and
# "beta_head", resnet18 with a head giving the log-density of a Beta distribution per class on a
# grid of 32 points (lgamma between the elementwise ops).
FALLBACK = ["gcnn_lm", "beta_head"]


class GatedConvLM(nn.Module):
    def __init__(self, vocab=10000, d=512, blocks=8, kernel=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.kernel = kernel
        self.convs = nn.ModuleList(nn.Conv1d(d, 2 * d, kernel) for _ in range(blocks))
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.embed(ids).transpose(1, 2)  # (batch, d, seq)
        for conv in self.convs:
            x = x + nn.functional.glu(conv(nn.functional.pad(x, (self.kernel - 1, 0))), dim=1)
        return self.out(self.norm(x.transpose(1, 2)))


class BetaHead(nn.Module):
    def __init__(self, classes=64, points=32):
        super().__init__()
        import torchvision
        self.backbone = torchvision.models.resnet18(num_classes=2 * classes)
        self.register_buffer("t", torch.linspace(0.02, 0.98, points))

    def forward(self, x):
        a, b = (nn.functional.softplus(self.backbone(x)) + 1).chunk(2, dim=1)
        a, b = a.unsqueeze(-1), b.unsqueeze(-1)  # (batch, classes, 1)
        log_norm = torch.lgamma(a + b) - torch.lgamma(a) - torch.lgamma(b)
        return log_norm + (a - 1) * torch.log(self.t) + (b - 1) * torch.log1p(-self.t)


class MainOutput(nn.Module):
    """A torchvision segmentation model returning its "out" map (a plain tensor, not a dict)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def transformers_model(name, mask, seq):
    import transformers
    if name == "hf_bert":
        config = transformers.BertConfig()  # bert-base: 12 layers, hidden 768, 12 heads
        model = transformers.BertModel(config, add_pooling_layer=False)
    elif name == "hf_distilbert":
        config = transformers.DistilBertConfig()  # 6 layers, hidden 768, 12 heads
        model = transformers.DistilBertModel(config)
    elif name == "hf_vit":
        config = transformers.ViTConfig()  # vit-base/16: 12 layers, hidden 768, 224x224
        model = transformers.ViTModel(config, add_pooling_layer=False)
        return (LastHiddenState(model.eval(), "pixel_values"),
                lambda b: torch.randn(b, 3, config.image_size, config.image_size))
    elif name == "hf_clip_text":
        config = transformers.CLIPTextConfig()  # 12 layers, hidden 512, 8 heads, 77 positions
        model = transformers.CLIPTextModel(config)
        vocab, seq = config.vocab_size, config.max_position_embeddings
        return LastHiddenState(model.eval()), tokens(vocab, seq, mask)
    elif name == "hf_llama":
        config = transformers.LlamaConfig(hidden_size=512, intermediate_size=1376,
                                          num_hidden_layers=8, num_attention_heads=8,
                                          num_key_value_heads=2, max_position_embeddings=2048)
        model = transformers.LlamaModel(config)
    else:
        config = transformers.GPT2Config()  # gpt2 (124M): 12 layers, hidden 768, 12 heads
        model = transformers.GPT2Model(config)
    return LastHiddenState(model.eval()), tokens(config.vocab_size, seq, mask)


def tokens(vocab, seq, mask):
    """make_input of a text model: token ids, or (ids, attention mask) of a padded batch."""
    if mask:
        return lambda b: padded_batch(vocab, b, seq)
    return lambda b: torch.randint(0, vocab, (b, seq))


SEQ_MODELS = ["bert", "gcnn_lm", "hf_bert", "hf_gpt2", "hf_distilbert", "hf_llama"]


def make_model(name, mask=False, seq=SEQ):
    """(model, make_input); with `mask`, the text transformers' make_input gives (token ids,
    attention mask) of a padded batch (padded_batch), their forward taking both. `seq`: the
    sequence length of the SEQ_MODELS (an error for the others when not SEQ)."""
    if seq != SEQ and name not in SEQ_MODELS:
        raise ValueError(f"{name} has no sequence length to set (models that take one: "
                         f"{', '.join(SEQ_MODELS)})")
    if name == "bert":
        model, make_input = Bert(seq=seq), lambda b: torch.randint(0, 30522, (b, seq))
    elif name in TRANSFORMERS:
        model, make_input = transformers_model(name, mask, seq)
    elif name == "gcnn_lm":
        model, make_input = GatedConvLM(), lambda b: torch.randint(0, 10000, (b, seq))
    elif name == "beta_head":
        model, make_input = BetaHead(), lambda b: torch.randn(b, 3, 224, 224)
        realistic_(model, make_input)
    else:
        import torchvision
        if name == "fcn_resnet50":
            model = MainOutput(torchvision.models.segmentation.fcn_resnet50(weights_backbone=None))
            make_input = lambda b: torch.randn(b, 3, 224, 224)  # noqa: E731
        elif name == "r3d_18":
            model = torchvision.models.video.r3d_18()
            make_input = lambda b: torch.randn(b, 3, 16, 112, 112)  # noqa: E731
        else:
            kwargs = {"init_weights": True} if name in ("googlenet", "inception_v3") else {}
            if name in ("googlenet", "inception_v3"):
                kwargs["aux_logits"] = False
            model = getattr(torchvision.models, name)(**kwargs)
            size = 299 if name == "inception_v3" else 224
            make_input = lambda b: torch.randn(b, 3, size, size)  # noqa: E731
        realistic_(model, make_input)
    return model.eval(), make_input


def realistic_(model, make_input):
    """torchvision's random init leaves batch-norm statistics at (0, 1) and zero-initializes some
    heads (vit_b_16's), so outputs vanish (efficientnet_b0's are ~1e-14, vit_b_16's 0) and "max
    diff" would compare zeros. Zero weights get N(0, 0.02) and the batch norms' statistics are
    measured on one random batch, so that activations and outputs are of order one."""
    with torch.no_grad():
        for m in model.modules():
            w = getattr(m, "weight", None)
            if isinstance(m, (nn.Linear, nn.Conv2d)) and not w.any():
                nn.init.normal_(w, std=0.02)
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.reset_running_stats()
                m.momentum = None  # a cumulative average: one batch sets the statistics
        model.train()
        model(make_input(8))
        model.eval()


def latency_ms(module, x, device, iters=20):
    """The median wall time of module(x) over `iters` calls after 3 of warm-up (synchronized on
    a GPU), in ms: the compile benchmarks' quick timing, not bench/gpu/bench.py's CUDA events."""
    with torch.no_grad():
        for _ in range(3):
            module(x)
        times = []
        for _ in range(iters):
            if device != "cpu":
                torch.cuda.synchronize()
            start = time.perf_counter()
            module(x)
            if device != "cpu":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def max_diff(a, b):
    if isinstance(a, (tuple, list)):
        return max(max_diff(x, y) for x, y in zip(a, b))
    return (a.float() - b.float()).abs().max().item()


def input_spec(x):
    """kilnc's input spec for an example tensor: "(1,3,224,224)@f32"."""
    if isinstance(x, (tuple, list)):
        return " ".join(input_spec(t) for t in x)
    dtype = {torch.long: "i64", torch.int32: "i32", torch.float16: "f16"}.get(x.dtype, "f32")
    return "(" + ",".join(str(d) for d in x.shape) + ")@" + dtype
