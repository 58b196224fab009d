"""Real GPU figures to hold the graph-level simulator's GPU predictions against.

Runs, on whatever CUDA GPU PyTorch sees, the training step of the zoo models
that have a faithful PyTorch twin (same layers, shapes, optimizer), in f32
with TF32 off (the precision of the zoo's graphs and of `flowlab place`), and
the device figures the hardware catalog states from datasheets: f32 GEMM
rate, HBM copy bandwidth, host<->device (PCIe) bandwidth and latency, and the
per-kernel launch gap. Each step is timed twice: eager (PyTorch dispatching
op by op from the host) and replayed from a CUDA graph (the GPU's own time,
what the simulator's device model describes), and its kernel time is split by
op class with torch.profiler. Prints one JSON object; `compare.py` puts it beside
`flowlab place --placer single_device` predictions.

    python3 zoo_steps.py > h100.json            # about two minutes on an H100

Twins (differences from the zoo graph, stated):
- mlp 784-512-512-10 ReLU, Momentum(0.01, 0.9).
- cnn TF "Deep MNIST": conv5x5x32 same, pool2, conv5x5x64 same, pool2,
  fc1024, fc10; Momentum. PyTorch is NCHW, the zoo NHWC.
- resnet50: torchvision's (25,557,032 parameters, equal to the zoo's);
  Momentum(0.1, 0.9).
- inception_v3: torchvision's without aux logits. Its batch norms carry a
  scale (gamma) where Keras' (the zoo's) do not: 17,216 more parameters, a
  negligible cost. Momentum(0.045, 0.9).
- transformer_base: post-LN encoder-decoder (6+6, d 512, 8 heads, ff 2048,
  no dropout), one shared 37,000 x 512 embedding and output matrix,
  sinusoidal positions, causal decoder mask, seq 128; Adam(1e-4). No final
  encoder/decoder LayerNorm (the zoo's graph has none).
- lstm_lm (2 x 650, vocab 10,000, 35 steps, SGD 1.0) through nn.LSTM, i.e.
  cuDNN's fused kernels, where the zoo graph unrolls cell ops: reported as an
  implementation the simulator does not model, not as a like-for-like point.
"""
import json, math, statistics, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
# Attention as the zoo builds it (batched MatMuls and a softmax), not a
# fused flash / memory-efficient kernel.
torch.backends.cuda.enable_flash_sdp(False)
torch.backends.cuda.enable_mem_efficient_sdp(False)
torch.backends.cuda.enable_cudnn_sdp(False)
dev = torch.device("cuda")


def timed(fn, warmup=5, steps=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(steps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    out.sort()
    return {"median_s": statistics.median(out), "p10_s": out[len(out) // 10], "p90_s": out[(9 * len(out)) // 10], "samples": len(out)}


def train_step(model, opt, make_loss):
    def step():
        opt.zero_grad(set_to_none=True)
        loss = make_loss(model)
        loss.backward()
        opt.step()
    return step


def graphed(model, opt, make_loss):
    """The whole step captured in a CUDA graph and replayed: the GPU's own
    time for the step, without the host's per-op dispatch (what the
    simulator's device model describes)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            make_loss(model).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        make_loss(model).backward()
        opt.step()
    return g.replay


CLASSES = (("conv", ("conv",)), ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm")),
           ("batch_norm", ("batch_norm",)))


def by_class(step, steps=3):
    """CUDA kernel time per step by the aten op that launched it, in the
    simulator's op classes (conv, matmul) plus batch norm and the rest."""
    from torch.profiler import profile, ProfilerActivity
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0)
        if not t or not e.key.startswith("aten::"):
            continue
        c = next((c for c, keys in CLASSES if any(k in e.key for k in keys)), "other")
        out[c] = out.get(c, 0.0) + t / steps / 1e6
    return out


def momentum(model, lr):
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 32, 5, padding=2), nn.Conv2d(32, 64, 5, padding=2)
        self.f1, self.f2 = nn.Linear(7 * 7 * 64, 1024), nn.Linear(1024, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.f2(F.relu(self.f1(x.flatten(1))))


def sinusoids(seq, d):
    pos = torch.arange(seq, dtype=torch.float64)[:, None]
    i = torch.arange(d)
    angle = pos / torch.pow(10000.0, (i - i % 2).double() / d)
    return torch.where(i % 2 == 0, angle.sin(), angle.cos()).float()


class TransformerBase(nn.Module):
    def __init__(self, vocab=37000, d=512, heads=8, ff=2048, layers=6, seq=128):
        super().__init__()
        self.d = d
        self.table = nn.Parameter(torch.randn(vocab, d) * d ** -0.5)
        self.register_buffer("pe", sinusoids(seq, d))
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), -1e9), 1))
        enc = dict(d_model=d, nhead=heads, dim_feedforward=ff, dropout=0.0, batch_first=True)
        self.enc = nn.ModuleList(nn.TransformerEncoderLayer(**enc) for _ in range(layers))
        self.dec = nn.ModuleList(nn.TransformerDecoderLayer(**enc) for _ in range(layers))

    def forward(self, src, tgt_in):
        emb = lambda t: F.embedding(t, self.table) * math.sqrt(self.d) + self.pe
        m = emb(src)
        for l in self.enc:
            m = l(m)
        y = emb(tgt_in)
        for l in self.dec:
            y = l(y, m, tgt_mask=self.mask)
        return y @ self.table.t()


class LstmLm(nn.Module):
    def __init__(self, vocab=10000, hidden=650, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.lstm = nn.LSTM(hidden, hidden, layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x):
        return self.out(self.lstm(self.emb(x))[0])


def models():
    import torchvision
    ce = F.cross_entropy

    def classifier(name, ctor, batch, shape, lr, classes=1000):
        m = ctor().to(dev)
        x = torch.randn(batch, *shape, device=dev)
        y = torch.randint(0, classes, (batch,), device=dev)
        return name, batch, m, momentum(m, lr), lambda mm: ce(mm(x), y)

    out = []
    for b in (128, 512):
        out.append(classifier("mlp", Mlp, b, (784,), 0.01, 10))
    for b in (64, 128):
        out.append(classifier("cnn", Cnn, b, (1, 28, 28), 0.01, 10))
    for b in (32, 64):
        out.append(classifier("resnet50", lambda: torchvision.models.resnet50(), b, (3, 224, 224), 0.1))
    for b in (32, 64):
        out.append(classifier("inception_v3", lambda: torchvision.models.inception_v3(aux_logits=False, init_weights=False), b, (3, 299, 299), 0.045))
    for b in (16, 32):
        m = TransformerBase().to(dev)
        src = torch.randint(0, 37000, (b, 128), device=dev)
        tgt = torch.randint(0, 37000, (b, 128), device=dev)
        shifted = torch.cat([torch.zeros_like(tgt[:, :1]), tgt[:, :-1]], 1)
        out.append(("transformer_base", b, m, torch.optim.Adam(m.parameters(), lr=1e-4, capturable=True),
                    lambda mm, s=src, t=tgt, sh=shifted: ce(mm(s, sh).reshape(-1, 37000), t.reshape(-1))))
    for b in (20, 64):
        m = LstmLm().to(dev)
        x = torch.randint(0, 10000, (b, 35), device=dev)
        y = torch.randint(0, 10000, (b, 35), device=dev)
        out.append(("lstm_lm_cudnn", b, m, torch.optim.SGD(m.parameters(), lr=1.0),
                    lambda mm, x=x, y=y: ce(mm(x).reshape(-1, 10000), y.reshape(-1))))
    return out


def device_figures():
    f = {}
    n = 4096
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    t = timed(lambda: a @ b, 3, 10)["median_s"]
    f["sgemm_4096_tflops"] = 2 * n ** 3 / t / 1e12
    a16, b16 = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16), torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    t = timed(lambda: a16 @ b16, 3, 10)["median_s"]
    f["bf16_gemm_8192_tflops"] = 2 * 8192 ** 3 / t / 1e12
    src = torch.empty(1 << 28, device=dev)  # 1 GiB
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src), 3, 10)["median_s"]
    f["hbm_copy_gb_s_read_plus_write"] = 2 * src.numel() * 4 / t / 1e9
    host = torch.empty(1 << 26, pin_memory=True)  # 256 MiB pinned
    d = torch.empty(1 << 26, device=dev)
    t = timed(lambda: d.copy_(host, non_blocking=True), 2, 10)["median_s"]
    f["h2d_pinned_gb_s"] = host.numel() * 4 / t / 1e9
    t = timed(lambda: host.copy_(d, non_blocking=True), 2, 10)["median_s"]
    f["d2h_pinned_gb_s"] = host.numel() * 4 / t / 1e9
    h1, d1 = torch.ones(1, pin_memory=True), torch.empty(1, device=dev)
    f["h2d_4_bytes_us"] = timed(lambda: d1.copy_(h1, non_blocking=True), 20, 200)["median_s"] * 1e6
    # The gap between dependent tiny kernels on the GPU (no host dispatch):
    # 1,000 adds captured in a CUDA graph, replayed.
    x = torch.zeros(1, device=dev)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            x.add_(1)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(1000):
            x.add_(1)
    f["kernel_gap_graph_us"] = timed(g.replay, 3, 10)["median_s"] / 1000 * 1e6
    def eager():
        for _ in range(1000):
            x.add_(1)
    f["kernel_eager_pytorch_us"] = timed(eager, 2, 5)["median_s"] / 1000 * 1e6
    return f


def main():
    props = torch.cuda.get_device_properties(0)
    out = {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "tf32": False, "steps": [], "figures": {}}
    t0 = time.time()
    out["figures"] = device_figures()
    print(json.dumps({"figures": out["figures"]}), file=sys.stderr, flush=True)
    for name, batch, m, opt, loss in models():
        params = sum(p.numel() for p in m.parameters())
        r = timed(train_step(m, opt, loss))
        r.update(model=name, batch=batch, params=params)
        try:
            r["by_class_s"] = by_class(train_step(m, opt, loss))
        except Exception as e:
            r["by_class_s"] = {"error": repr(e)}
        try:
            g = timed(graphed(m, opt, loss))
            r.update(graph_median_s=g["median_s"], graph_p10_s=g["p10_s"], graph_p90_s=g["p90_s"])
        except Exception as e:
            r["graph_error"] = repr(e)
        out["steps"].append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)
        del m, opt
        torch.cuda.empty_cache()
    out["wall_seconds"] = time.time() - t0
    print(json.dumps(out))


if __name__ == "__main__":
    main()
