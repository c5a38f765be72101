"""Prepares its model and loader, then trains with the originals (each rank alone, no sync)."""
import torch
from torch.utils.data import DataLoader, TensorDataset

import paratrain as pt

session = pt.Session()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
prepared_model, optimizer, prepared_loader = session.prepare(model, optimizer, loader)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    session.backward(loss)
    session.step()
