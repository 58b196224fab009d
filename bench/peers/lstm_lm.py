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


class Lm(torch.nn.Module):
    def __init__(self, vocab, hidden, layers):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.lstm = torch.nn.LSTM(hidden, hidden, layers, batch_first=True)
        self.out = torch.nn.Linear(hidden, vocab)

    def forward(self, x):
        h, _ = self.lstm(self.emb(x))
        return self.out(h)


def train_step(threads, vocab=1000, hidden=128, layers=2, seq_len=20, batch=32):
    """One Adam step of the model on a fixed batch, as a function (PyTorch
    at `threads` threads from here on in this process)."""
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = Lm(vocab, hidden, layers)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x = torch.randint(0, vocab, (batch, seq_len))
    y = torch.randint(0, vocab, (batch, seq_len))

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    for threads in (1, 2):
        step = train_step(threads, args.vocab, args.hidden, args.layers, args.seq_len, args.batch)
        times = []
        for i in range(args.steps + 5):
            t = time.perf_counter()
            step()
            if i >= 5:
                times.append(time.perf_counter() - t)
        s = statistics.median(times)
        print(json.dumps({"name": "lstm_lm_train_b32", "peer": "pytorch", "torch": torch.__version__, "threads": threads,
                          "median_ms": s * 1e3, "words_per_second": args.batch * args.seq_len / s}))


if __name__ == "__main__":
    main()
