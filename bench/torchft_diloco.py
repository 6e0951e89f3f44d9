"""torchft's own DiLoCo on the CNN of `phalanx train --model cnn --dataset mnist5k`: the reference
bench/wan_torchft.sh puts next to `phalanx train --outer diloco` (docs/outer.md).

One process per rank of one replica group (an "island"), started by torchrun per host:

  torchft_lighthouse --min_replicas 2 --bind 0.0.0.0:29510 &                       # once, on host 0
  GLOO_SOCKET_IFNAME=eth0 torchrun --nnodes 1 --nproc-per-node 2 --master-addr HOST_IP \
      --master-port 29500 bench/torchft_diloco.py --replica-id I --replicas 2 \
      --lighthouse http://LIGHTHOUSE_IP:29510 --host HOST_IP --sync-every 20 --epochs 3

Inside a group the ranks run torch DDP over gloo (torchrun's store, every step); across groups
torchft's Manager (use_async_quorum=False, ProcessGroupGloo, the lighthouse's quorum) carries
torchft.local_sgd.DiLoCo's outer all-reduce of the pseudo-gradients every --sync-every steps, and
the outer optimizer is SGD(lr 0.7, momentum 0.9, nesterov). Group rank j of every group forms its
own cross-group process group, so each rank all-reduces the whole pseudo-gradient (f32: torchft's
quantized path needs triton, i.e. CUDA).

What mirrors phalanx (so the runs see the same samples in the same steps): mnist_5k.csv.gz,
pixels / 255, a torch randperm(5000, seed 0) holds out 1,000 rows and both parts keep file order
(phalanx_data::Dataset::split); DistributedSampler(shuffle, seed 0) over all replicas x ranks with
rank = replica * group_size + group rank (consecutive ranks form an island, as --island-size);
batch 32 per rank, last partial batch dropped (31 steps an epoch); Adam(lr 1e-3); the models start
equal (torch.manual_seed(0)), so init_sync=False, as torchft's Manager docs say for equal seeds.
--final-sync (default on) makes the run's last step a sync whatever the count, as phalanx does,
by moving DiLoCo's step counter so its own post-step hook syncs; without it a run of 93 steps at
H 100 never syncs. torchft syncs parameters only: BatchNorm running statistics stay each group's
(DDP broadcasts group rank 0's inside a group), so the accuracy printed is group 0's model.

Prints from replica 0 rank 0 one JSON line per epoch and a summary: test accuracy, samples/s (train
samples of all ranks over the training loops' time, syncs included, evaluation excluded: phalanx's
definition), the syncs and the bytes the outer all-reduce moves per rank by the algorithm's count.
"""
import argparse, gzip, json, os, time
from datetime import timedelta

T0 = time.time()
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from torchft import Manager, ProcessGroupGloo
from torchft.checkpointing.http_transport import HTTPTransport
from torchft.local_sgd import DiLoCo

HERE = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser()
p.add_argument("--replica-id", type=int, default=int(os.environ.get("REPLICA_GROUP_ID", 0)))
p.add_argument("--replicas", type=int, default=2, help="replica groups (islands)")
p.add_argument("--lighthouse", default=os.environ.get("TORCHFT_LIGHTHOUSE", "http://127.0.0.1:29510"))
p.add_argument("--host", default="127.0.0.1", help="this host's address, advertised to the lighthouse")
p.add_argument("--data", default=os.path.join(HERE, "..", "data", "mnist_5k.csv.gz"))
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batch", type=int, default=32, help="per rank")
p.add_argument("--lr", type=float, default=1e-3)
p.add_argument("--outer-lr", type=float, default=0.7)
p.add_argument("--outer-momentum", type=float, default=0.9)
p.add_argument("--sync-every", type=int, required=True)
p.add_argument("--final-sync", type=int, default=1)
p.add_argument("--test-fraction", type=float, default=0.2)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--threads", type=int, default=1, help="torch threads per rank (4 ranks share 2 cores)")
p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in all (development)")
a = p.parse_args()
torch.set_num_threads(a.threads)

dist.init_process_group("gloo", timeout=timedelta(seconds=300))  # the group's own, torchrun's store
g_rank, g_world = dist.get_rank(), dist.get_world_size()
world = a.replicas * g_world
rank = a.replica_id * g_world + g_rank

# Data: phalanx_data::mnist5k().split(0.2, 0) (crates/data/src/dataset.rs).
rows = [list(map(int, l.split(","))) for l in gzip.open(a.data, "rt") if l.strip()]
t = torch.tensor(rows)
x, y = t[:, :784].float().div(255).view(-1, 1, 28, 28), t[:, 784].long()
perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(a.seed))
n_test = round(len(x) * a.test_fraction)
test_i, train_i = perm[:n_test].sort().values, perm[n_test:].sort().values
xte, yte, xtr, ytr = x[test_i], y[test_i], x[train_i], y[train_i]
ds = TensorDataset(xtr, ytr)
sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=a.seed)
loader = DataLoader(ds, batch_size=a.batch, sampler=sampler, drop_last=True)


class Cnn(nn.Module):
    """Copied from ../shared/anchors/ddp/torch_models.py (class Cnn), the PyTorch twin of
    `phalanx train --model cnn`; that file is a script (it parses arguments and joins a process
    group at import), so it cannot be imported."""

    def __init__(s):
        super().__init__()
        s.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Dropout(0.2), nn.Linear(32 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(s, x):
        return s.body(x)


torch.manual_seed(a.seed)
net = Cnn()
model = DDP(net)  # inside the group: every step, over gloo
nparams = sum(q.numel() for q in net.parameters())
crit = nn.CrossEntropyLoss()
inner = torch.optim.Adam(net.parameters(), lr=a.lr)
outer = torch.optim.SGD(net.parameters(), lr=a.outer_lr, momentum=a.outer_momentum, nesterov=True)


class AddressedHTTPTransport(HTTPTransport):
    """torchft's checkpoint server advertises socket.gethostname(), 127.0.0.1 on these machines:
    advertise the host's own address instead (used only when a replica heals)."""

    def address(self):
        return "http://%s:%d/checkpoint/" % (a.host, self._server.socket.getsockname()[1])


def state_dict():
    return {"model": net.state_dict(), "inner": inner.state_dict(), "outer": outer.state_dict()}


def load_state_dict(sd):
    net.load_state_dict(sd["model"]); inner.load_state_dict(sd["inner"]); outer.load_state_dict(sd["outer"])


manager = Manager(
    pg=ProcessGroupGloo(timeout=timedelta(seconds=120)),
    load_state_dict=load_state_dict, state_dict=state_dict,
    min_replica_size=a.replicas, use_async_quorum=False, init_sync=False,
    timeout=timedelta(seconds=120), quorum_timeout=timedelta(seconds=300),
    connect_timeout=timedelta(seconds=60),
    rank=g_rank, world_size=g_world,
    store_addr=os.environ["MASTER_ADDR"], store_port=int(os.environ["MASTER_PORT"]),
    lighthouse_addr=a.lighthouse, replica_id="phx_%d" % a.replica_id, hostname=a.host,
    checkpoint_transport=AddressedHTTPTransport(timeout=timedelta(seconds=60), num_chunks=0),
)


def accuracy():
    net.eval()
    with torch.no_grad():
        ok = sum((net(xte[i:i + 500]).argmax(1) == yte[i:i + 500]).sum().item() for i in range(0, len(xte), 500))
    net.train()
    return ok / len(xte)


steps_per_epoch = len(loader)
total = a.epochs * steps_per_epoch
if a.max_steps:
    total = min(total, a.max_steps)
lead = a.replica_id == 0 and g_rank == 0
syncs, step, train_time, loss_sum = 0, 0, 0.0, 0.0
with DiLoCo(manager, [net], inner, outer, sync_every=a.sync_every, backup_device=torch.device("cpu"),
            pin_memory=False) as diloco:
    for epoch in range(a.epochs):
        if step >= total:
            break
        sampler.set_epoch(epoch)
        dist.barrier()
        t_ep, n, loss_sum = time.time(), 0, 0.0
        for xb, yb in loader:
            inner.zero_grad()
            loss = crit(model(xb), yb)
            loss.backward()
            step += 1
            if a.final_sync and step == total and diloco._local_step != diloco._sync_every - 1:
                diloco._local_step = diloco._sync_every - 1  # this step's post-step hook syncs
            if diloco._local_step == diloco._sync_every - 1:
                syncs += 1
            inner.step()  # DiLoCo's hook: the outer sync when due
            loss_sum += loss.item(); n += 1
            if step >= total:
                break
        dist.barrier()
        el = time.time() - t_ep
        train_time += el
        acc = accuracy()
        if lead:
            print(json.dumps(dict(event="epoch", epoch=epoch + 1, train_loss=loss_sum / max(n, 1),
                                  test_accuracy=acc, samples_per_s=n * a.batch * world / el, seconds=el,
                                  manager_step=manager.current_step())), flush=True)

import importlib.metadata
if lead:
    # Each rank all-reduces the whole f32 pseudo-gradient with its counterpart in every other group:
    # a ring all-reduce sends 2 (I - 1) / I of it per rank.
    per_sync = 4 * nparams * 2 * (a.replicas - 1) / a.replicas
    print(json.dumps(dict(event="summary", system="torchft-diloco", torchft=importlib.metadata.version("torchft"),
                          torch=torch.__version__, world=world, replicas=a.replicas, params=nparams, batch=a.batch,
                          steps=step, sync_every=a.sync_every, syncs=syncs, manager_step=manager.current_step(),
                          test_accuracy=acc, train_loss=loss_sum / max(n, 1),
                          samples_per_s=step * a.batch * world / train_time,
                          outer_bytes_across_per_rank=int(syncs * per_sync), wall_s=time.time() - T0)), flush=True)
manager.shutdown(wait=False)
dist.destroy_process_group()
