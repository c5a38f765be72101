"""Rank 1 raises; the others wait in a collective that can never complete."""
import paratrain as pt

session = pt.Session()
if session.rank == 1:
    raise RuntimeError("boom on rank 1")
session.barrier()
