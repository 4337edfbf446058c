"""One rank of the 2-process DDP test (``test_ddp.py``); also the shared model, data and configs.

    python _ddp_worker.py RANK WORLD_SIZE OUT_DIR      (MASTER_ADDR / MASTER_PORT in the environment)

Every rank builds the same float model (same seed), quantizes it with each TQT config on its OWN
calibration data, records the thresholds before DistributedDataParallel touches anything, then
trains 3 SGD steps on its own data under DDP, recording all parameters after every step. Rank 0
also saves its checkpoint and its outputs on a fixed input. Last, every rank quantizes again with
rank 1 given no calibration batch (uneven shards). Results go to OUT_DIR as .pt files.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, QuantizationMode, ScaleType, TQTThresholdInitMeth

INITS = {
    "minmax": None,
    "3sd": TQTThresholdInitMeth._3SD,
    "ll_j": TQTThresholdInitMeth._LL_J,
    "graph_minmax": None,  # graph mode: the network input and the ReLU's output quantized too
}
STEPS = 3


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 6 * 6, 10),
    ).eval()


def config(init: str) -> Config:
    def tqt(dtype: Dtype) -> QuantizationSpec:
        return QuantizationSpec(dtype=dtype, symmetric=True, scale_type=ScaleType.pof2, qat_spec=TQTSpec(INITS[init]))

    mode = QuantizationMode.fx_graph_mode if init.startswith("graph") else QuantizationMode.eager_mode
    return Config(
        global_quant_config=QuantizationConfig(weight=tqt(Dtype.int4), input_tensors=tqt(Dtype.int8)), quant_mode=mode
    )


def calib_batches(rank: int) -> list[torch.Tensor]:
    """Different data per rank: rank 1's has a larger range and another mean (so sync matters)."""
    g = torch.Generator().manual_seed(1000 + rank)
    return [torch.randn(8, 3, 6, 6, generator=g) * (1 + 2 * rank) + rank for _ in range(2 + rank)]


def train_batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(2000 + rank)
    return [(torch.randn(8, 3, 6, 6, generator=g), torch.randint(0, 10, (8,), generator=g)) for _ in range(STEPS)]


def fixed_input() -> torch.Tensor:
    return torch.randn(4, 3, 6, 6, generator=torch.Generator().manual_seed(3))


def thresholds(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k.endswith("scaling_impl.value")}


def params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def main(rank: int, world: int, out: Path) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    try:
        for init in INITS:
            q = ModelQuantizer(config(init)).quantize_model(build_model(), calib_batches(rank), progress=False)
            record = {"init": thresholds(q), "init_params": params(q), "steps": []}
            ddp = nn.parallel.DistributedDataParallel(q)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
            ddp.train()
            for x, y in train_batches(rank):
                opt.zero_grad()
                F.cross_entropy(ddp(x), y).backward()
                opt.step()
                record["steps"].append({"thresholds": thresholds(q), "params": params(q)})
            torch.save(record, out / f"{init}_rank{rank}.pt")
            if rank == 0:
                q.eval()
                with torch.no_grad():
                    torch.save({"state_dict": q.state_dict(), "out": q(fixed_input())}, out / f"{init}_ckpt.pt")
            dist.barrier()
            # uneven shards: rank 1 has no calibration batch at all
            empty = ModelQuantizer(config(init)).quantize_model(
                build_model(), calib_batches(rank) if rank == 0 else [], progress=False
            )
            torch.save(thresholds(empty), out / f"{init}_empty_rank{rank}.pt")
        dist.barrier()  # tear down together: gloo can hang in destroy once the peer has exited
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
