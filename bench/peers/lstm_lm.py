"""PyTorch's nn.LSTM language model at the sizes of `flowlab train lstm-lm`:
embedding V x H, L stacked LSTM layers of H units over T words, a linear
layer to V logits at every step, mean cross entropy, Adam. Prints one JSON
line per thread count: median seconds per training step and words/s
(B x T words per step), for comparison with `flowlab train lstm-lm --json`
(`words_per_second`, training steps only).

    python3 bench/peers/lstm_lm.py --vocab 1000 --hidden 128 --layers 2 --seq-len 20 --batch 32
"""
import argparse, json, statistics, time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--vocab", type=int, default=1000)
ap.add_argument("--hidden", type=int, default=128)
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--seq-len", type=int, default=20)
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--steps", type=int, default=50)
args = ap.parse_args()


class Lm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(args.vocab, args.hidden)
        self.lstm = torch.nn.LSTM(args.hidden, args.hidden, args.layers, batch_first=True)
        self.out = torch.nn.Linear(args.hidden, args.vocab)

    def forward(self, x):
        h, _ = self.lstm(self.emb(x))
        return self.out(h)


for threads in (1, 2):
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = Lm()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    y = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    times = []
    for step in range(args.steps + 5):
        t = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        if step >= 5:
            times.append(time.perf_counter() - t)
    s = statistics.median(times)
    print(json.dumps({"name": "lstm_lm_train_b32", "peer": "pytorch", "torch": torch.__version__, "threads": threads,
                      "median_ms": s * 1e3, "words_per_second": args.batch * args.seq_len / s}))
