"""The SimGrid engine both scripts here compare with: CM02 with TCP-gamma 0,
no cross-traffic, bandwidth and latency factors 1 (textbook max-min fair
sharing), on a platform given as XML text."""
import os
import tempfile


def max_min_engine(name, platform_xml):
    """A SimGrid engine (one per process) with `platform_xml` loaded."""
    from simgrid import Engine

    with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
        f.write(platform_xml)
        path = f.name
    e = Engine([
        name,
        "--cfg=network/model:CM02",
        "--cfg=network/TCP-gamma:0",
        "--cfg=network/crosstraffic:0",
        "--cfg=network/bandwidth-factor:1",
        "--cfg=network/latency-factor:1",
        "--log=root.thres:critical",
    ])
    e.load_platform(path)
    os.unlink(path)
    return e
