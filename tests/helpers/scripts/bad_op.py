import paratrain as pt

pt.Session().all_reduce(1.0, op="avg")
