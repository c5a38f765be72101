import paratrain as pt

session = pt.Session()
session.print(f"hello from the main rank of {session.world_size}")
