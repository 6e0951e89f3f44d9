"""Ray Train over backend "phalanx", tried as a new user would: a local Ray cluster,
``TorchTrainer`` with ``TorchConfig(backend="phalanx")`` and a ``worker_process_setup_hook``
that imports ``phalanx_torch`` (which registers the backend) in every worker.

    python test_ray.py equal      # the seed MLP on 2 workers: parameters equal to gloo's
    python test_ray.py kill       # rank 1 SIGKILLed mid-run: fit() fails, naming the rank
    python test_ray.py equal kill # both, in turn, on one Ray cluster (one start, one shutdown)

Prints ``RAY OK <what>`` on success; any failure raises. Run by crates/cli/tests/torch_ray.rs.
"""

import os
import signal
import sys
import tempfile
import threading
import time
import traceback

import ray
import torch
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

STEPS = 30


def setup_hook():
    import phalanx_torch  # noqa: F401  registers the backend "phalanx" in this worker


def seed_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    )


def train_loop(config):
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.parallel.DistributedDataParallel(seed_mlp())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1234)
    x_all = torch.randn(STEPS * world * 16, 64, generator=gen)
    y_all = torch.randint(0, 10, (STEPS * world * 16,), generator=gen)
    for step in range(config.get("steps", STEPS)):
        lo = (step * world + rank) * 16 % len(x_all)
        x, y = x_all[lo : lo + 16], y_all[lo : lo + 16]
        opt.zero_grad()
        try:
            torch.nn.functional.cross_entropy(model(x), y).backward()
        except Exception as e:
            if config.get("pid_dir"):
                # What this rank saw, and when: the driver checks it names the dead rank.
                with open(os.path.join(config["pid_dir"], f"error.{rank}"), "w") as f:
                    f.write(f"{time.time()} {type(e).__name__}: {e}")
            raise
        opt.step()
        if step == 5 and config.get("pid_dir"):
            # Training is under way: the driver may kill this rank now.
            with open(os.path.join(config["pid_dir"], f"pid.{rank}"), "w") as f:
                f.write(str(os.getpid()))
        if config.get("slow"):
            time.sleep(0.05)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    # Replicas must be equal: every rank's parameters against rank 0's.
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    assert all(torch.equal(g, gathered[0]) for g in gathered), "replicas differ"
    if rank == 0 and config.get("out"):
        torch.save({"backend": dist.get_backend(), "params": flat}, config["out"])
    from ray import train

    train.report({"rank": rank})


def fit(backend, config, timeout_s=None):
    trainer = TorchTrainer(
        train_loop,
        train_loop_config=config,
        torch_config=TorchConfig(backend=backend, timeout_s=timeout_s or 60),
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        run_config=RunConfig(
            storage_path=tempfile.mkdtemp(prefix="phalanx_ray_"),
            failure_config=FailureConfig(max_failures=0),
        ),
    )
    return trainer.fit()


def equal():
    out = tempfile.mkdtemp(prefix="phalanx_ray_out_")
    fit("gloo", {"out": os.path.join(out, "gloo.pt")})
    fit("phalanx", {"out": os.path.join(out, "phalanx.pt")})
    gloo, phalanx = (torch.load(os.path.join(out, f"{b}.pt")) for b in ("gloo", "phalanx"))
    assert phalanx["backend"] == "phalanx", phalanx["backend"]
    a, b = gloo["params"], phalanx["params"]
    # Two ranks: a sum of two terms is the same in either order, so bitwise equal.
    assert torch.equal(a, b), f"max difference {(a - b).abs().max().item()}"
    print(f"RAY OK equal: {a.numel()} parameters bitwise equal to gloo's after {STEPS} steps")


def kill():
    pid_dir = tempfile.mkdtemp(prefix="phalanx_ray_pids_")
    killed_at = [None]

    def killer():
        path = os.path.join(pid_dir, "pid.1")
        while not os.path.exists(path):
            time.sleep(0.05)
        time.sleep(0.5)
        killed_at[0] = time.time()
        os.kill(int(open(path).read()), signal.SIGKILL)

    threading.Thread(target=killer, daemon=True).start()
    begin = time.monotonic()
    # Ray's train controller checks its workers every 2 s, and on finding rank 1 dead tears
    # the whole group down, rank 0 included. A check landing just after the kill took rank 0
    # away before its own collective failed and it could say why (a loaded CI run: error.0
    # missing). Checked every 10 s, rank 0 fails first, as a real job's survivors do; fit()
    # still fails at the next check. Ray passes this variable from the driver to the
    # controller of each fit, so only this fit is affected.
    os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = "10"
    try:
        fit("phalanx", {"pid_dir": pid_dir, "steps": 100000, "slow": True})
    except Exception as e:  # ray.train.base_trainer.TrainingFailedError
        took = time.monotonic() - begin
        text = f"{type(e).__name__}: {e}"
        cause = e.__cause__
        while cause is not None:
            text += f"\n{type(cause).__name__}: {cause}"
            cause = cause.__cause__
        print(text)
        assert took < 90, f"fit() took {took:.1f} s to fail"
        # Rank 0's own error: phalanx's, naming the rank that died.
        seen = open(os.path.join(pid_dir, "error.0")).read()
        at, what = seen.split(" ", 1)
        print(f"rank 0 saw, {float(at) - killed_at[0]:.2f} s after the kill: {what}")
        assert "PhalanxError" in what and "rank 1" in what, what
        print(f"RAY OK kill: fit() failed after {took:.1f} s")
        return
    finally:
        del os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"]
    raise AssertionError("fit() succeeded although rank 1 was killed")


SHUTDOWN_S = 30


def shutdown_within(seconds):
    """``ray.shutdown()``, bounded. On a loaded 2-core machine Ray's own cleanup (its detached
    PlacementGroupCleaner polling a controller that is gone) has kept the driver alive for
    minutes after every check here had passed. Past ``seconds`` this says so and returns; the
    caller exits at once, and crates/cli/tests/torch_ray.rs kills whatever is left of Ray in
    the driver's session."""
    done = threading.Event()

    def stop():
        ray.shutdown()
        done.set()

    threading.Thread(target=stop, daemon=True).start()
    if not done.wait(seconds):
        print(f"ray.shutdown() had not returned after {seconds} s; exiting without it",
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        runtime_env={"worker_process_setup_hook": setup_hook},
        log_to_driver=True,
    )
    code = 1
    try:
        modes = {"equal": equal, "kill": kill}
        unknown = [m for m in sys.argv[1:] if m not in modes]
        if unknown or len(sys.argv) < 2:
            raise SystemExit(f"usage: test_ray.py equal|kill...; unknown mode(s) {unknown}")
        # Starting a Ray cluster costs tens of seconds on 2 cores: the modes share one.
        for mode in sys.argv[1:]:
            modes[mode]()
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        shutdown_within(SHUTDOWN_S)
        sys.stdout.flush()
        sys.stderr.flush()
        # Not sys.exit: Ray's atexit hooks would wait on the same cleanup again.
        os._exit(code)
