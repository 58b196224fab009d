"""How a GPU's host link is shared: one transfer alone, two in the same
direction at once, and one each way at once (pinned host memory, 256 MiB
per transfer, each on its own CUDA stream). Prints one JSON object of
aggregate GB/s (all bytes over the time to the last transfer's end).

The simulator's link model is checked against it: a device's host link is
one port per direction, shared by the transfers in that direction, while the
two directions are independent (PCIe is full duplex).
"""
import json, statistics

import torch

N = 1 << 26  # floats: 256 MiB
dev = torch.device("cuda")


def run(pairs, reps=20):
    """Aggregate GB/s of `pairs` (dst, src) started together, each on its
    own stream: all bytes over the time from the common start to the last
    end (so transfers that take turns show as one link's rate)."""
    streams = [torch.cuda.Stream() for _ in pairs]
    rates = []
    for r in range(reps + 3):
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        ends = []
        for (dst, src), s in zip(pairs, streams):
            s.wait_event(start)
            with torch.cuda.stream(s):
                dst.copy_(src, non_blocking=True)
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                ends.append(e)
        torch.cuda.synchronize()
        if r >= 3:
            rates.append(len(pairs) * N * 4 / (max(start.elapsed_time(e) for e in ends) / 1e3) / 1e9)
    return statistics.median(rates)


def main():
    h = [torch.empty(N, pin_memory=True) for _ in range(2)]
    d = [torch.empty(N, device=dev) for _ in range(2)]
    out = {
        "device": torch.cuda.get_device_name(0),
        "h2d_alone": run([(d[0], h[0])]),
        "d2h_alone": run([(h[0], d[0])]),
        "h2d_two_at_once_total": run([(d[0], h[0]), (d[1], h[1])]),
        "h2d_and_d2h_at_once_total": run([(d[0], h[0]), (h[1], d[1])]),
        "h2d_alone_again": run([(d[0], h[0])]),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
