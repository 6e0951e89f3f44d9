"""The handwritten digits the fault-tolerance scripts train on (data/digits.csv.gz: 1,797
8x8 images, UCI's, shipped with the repository): the pixels scaled to [0, 1], the labels, and
the split into 1,497 training and 300 test images."""

import gzip
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
with gzip.open(os.path.join(HERE, "../../data/digits.csv.gz"), "rt") as f:
    _rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
X, Y = torch.from_numpy(_rows[:, :64] / 16.0), torch.from_numpy(_rows[:, 64]).long()
TRAIN, TEST = slice(0, 1497), slice(1497, None)
