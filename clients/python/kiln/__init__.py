"""kiln's Python client: define tensor operators (as .kiln text, or in Python
with kiln.te) and check, emit, compile and run them on kilnd, or measure them on
its agents.

    import kiln
    with kiln.Client("127.0.0.1:50051") as c:
        r = c.run(kiln.load("examples/matmul.kiln"), check=True)
        print(r.ok, r.checksums)

docs/python.md has the whole API.
"""

from kiln import te
from kiln.client import Client, KilnError, Measurement, RunResult, load, source

__all__ = ["Client", "KilnError", "Measurement", "RunResult", "load", "source", "te"]
__version__ = "0.1.0"
