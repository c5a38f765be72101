"""Everything that consumes a ``paratrain compare`` results dict: the recommendation, the table, report.md,
results.csv, the plots and the run history.

Kept apart from the runner so a saved results.json can be re-rendered, diffed and plotted later without rerunning
any training (``paratrain report``); the results dict is the only contract between the two halves.
"""
