"""Rank 1 stalls before a collective; with --timeout the job must fail instead of hanging."""
import time

import torch

import paratrain as pt

session = pt.Session()
if session.rank == 1:
    time.sleep(120)
session.all_reduce(torch.ones(1))
