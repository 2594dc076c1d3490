"""kiln's Python client: define tensor operators (as .kiln text, or in Python
with kiln.te) and check, emit, compile and run them on kilnd, or measure them on
its agents, and tune their knobs there:

    with kiln.Client() as c:
        job = c.tune(kiln.load("gemm.kiln"), "local", trials=64)
        for p in job:
            print(p.trials, p.best.median_ms)
        print(c.best(kiln.load("gemm.kiln"), "local"))

    import kiln
    with kiln.Client("127.0.0.1:50051") as c:
        r = c.run(kiln.load("examples/matmul.kiln"), check=True)
        print(r.ok, r.checksums)

docs/python.md has the whole API.
"""

from kiln import te
from kiln.client import (Client, KilnError, Measurement, Record, RunResult, TuneJob, load,
                         source)

__all__ = ["Client", "KilnError", "Measurement", "Record", "RunResult", "TuneJob", "load",
           "source", "te"]
__version__ = "0.1.0"
