"""A workload's torch twin made callable: weights loaded, inputs converted, eager or compiled.

`build_program(workload, compile_kwargs)` returns a `TorchProgram` whose `call(*args)` has the
calling convention of the XLA program, so `xlafuse.measurement.timing` times both the same way:
- forward: `call(*inputs)` -> a `Ready` handle of the output;
- train: `call(token, batch) -> (token, Ready(loss))`: one step (zero grads, forward, loss,
  backward, `torch.optim.AdamW.step`); the state lives in the module and optimizer, so the
  token (None) only lets `timing.thread_state` thread "the new state" as for XLA.

`Ready` is how torch's asynchronous execution meets the timing code: the timing functions call
`jax.block_until_ready(out)`, which calls `block_until_ready()` on every non-JAX leaf it finds;
`Ready.block_until_ready` synchronizes the torch device. So the timed region ends exactly when
the device is done, and pipelined timing still queues calls without a sync between them.

The optimizer has optax.adamw's hyper-parameters: the workload's learning rate, b1 0.9,
b2 0.999, eps 1e-8, weight decay 1e-4 (decoupled, applied to every parameter). Under Inductor
the loss function (forward + AOTAutograd backward) and the optimizer step are each compiled.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import torch

from xlafuse.kinds import Backend, Mode
from xlafuse.torch import convert, twins

ADAMW = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-4}  # optax.adamw defaults

# The float unary ops that ATen hands to MKL's vector math (VML) on the CPU, and a few more.
VML_OPS = (
    *("acos", "asin", "atan", "cos", "cosh", "erf", "erfc", "erfinv", "exp", "expm1"),
    *("lgamma", "log", "log10", "log1p", "log2", "rsqrt", "sigmoid", "sin", "sinh", "sqrt"),
    *("tan", "tanh"),
)


def device() -> torch.device:
    """The torch device beside JAX's: CUDA when JAX runs on a GPU, else the CPU.

    Raises:
      RuntimeError: JAX has a GPU but this torch build cannot use CUDA.
    """
    if jax.default_backend() == Backend.GPU:
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"JAX runs on a GPU but torch {torch.__version__} sees no CUDA device: "
                "install a CUDA build of torch"
            )
        return torch.device("cuda")
    return torch.device("cpu")


def synchronize(dev: torch.device) -> None:
    """Wait until `dev` has finished its queued work (nothing to wait for on the CPU)."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


@dataclasses.dataclass(frozen=True)
class Ready:
    """A torch result that `jax.block_until_ready` can wait for (it calls this method)."""

    value: Any
    device: torch.device

    def block_until_ready(self) -> Ready:
        synchronize(self.device)
        return self


@dataclasses.dataclass
class TorchProgram:
    """A twin ready to call.

    Attributes:
      call: `call(*args)`, convention in the module docstring.
      args: its arguments.
      train: True for a train step.
      model: the twin module (None for parameter-free workloads).
      optimizer: the AdamW optimizer (train only).
      device: where it runs.
    """

    call: Callable[..., Any]
    args: tuple[Any, ...]
    train: bool
    model: torch.nn.Module | None
    optimizer: torch.optim.Optimizer | None
    device: torch.device

    def tensors(self) -> dict[str, torch.Tensor]:
        """The twin's parameters and buffers by name."""
        if self.model is None:
            return {}
        return dict(self.model.named_parameters()) | dict(self.model.named_buffers())

    def gradients(self) -> dict[str, torch.Tensor]:
        """The parameters' gradients of the last step, by name."""
        assert self.model is not None
        return {n: p.grad for n, p in self.model.named_parameters() if p.grad is not None}


def backend_of(dev: torch.device) -> Backend:
    """The JAX backend a torch device is judged as (its figures, its kernel counts): torch
    names its CPU device as JAX names the backend, and a GPU "cuda"."""
    return Backend.CPU if dev.type == Backend.CPU else Backend.GPU


def build_program(
    workload: Any, compile_kwargs: Mapping[str, Any] | None, *, dev: torch.device | None = None
) -> TorchProgram:
    """The twin of `workload` with its weights and inputs, eager or `torch.compile`d.

    Args:
      workload: an `xlafuse.models.Workload`.
      compile_kwargs: keyword arguments of `torch.compile` (e.g. `{"mode": "max-autotune"}`),
        or None for eager execution.
      dev: the torch device; `device()` when None.

    Raises:
      ValueError: the workload has no twin, is sharded over several devices, or has a dtype or
        option the twin cannot take.
    """
    if workload.devices > 1:
        raise ValueError(
            f"workload {workload.name!r} is sharded over {workload.devices} devices; the torch "
            "twins run on one device: use devices = 1 for torch variants"
        )
    dev = dev or device()
    if not twins.has_twin(workload.name):
        raise ValueError(twins.no_twin_message(workload.name))
    if backend_of(dev) == Backend.CPU:
        settle_vml_dispatch()
    if workload.name in twins.POINTWISE:
        return _pointwise(workload, compile_kwargs, dev)
    model = _model(workload, dev)
    if workload.mode == Mode.TRAIN:
        return _train(workload, model, compile_kwargs, dev)
    model.eval()
    inputs = _inputs(workload, workload.args[1:], dev)
    fn = model if compile_kwargs is None else torch.compile(model, **compile_kwargs)
    return TorchProgram(_forward(fn, dev), inputs, False, model, None, dev)


@functools.cache
def settle_vml_dispatch() -> None:
    """Call each op of `VML_OPS` once, on one element of float32 and of float64, once a process.

    ATen computes a contiguous float tensor's cos, exp, sqrt, ... on the CPU with MKL's VML, each
    intra-op thread on its chunk. The oneMKL that torch's wheels link (2024.2) chooses each VML
    function's kernel on its first call; when that first call runs on several threads at once, one
    thread's chunk can be computed by a low-accuracy kernel (about 1,000 to 4,000 ulp:
    pytorch/pytorch#188792). A twin's first call is the one judged against XLA: seen here as a
    cos_relu twin 1.5e-4 (about 2,500 ulp) from XLA on a 2-core CPU, once. A one-element call
    runs on one thread, so each function's kernel is chosen before any twin runs.
    """
    for dtype in (torch.float32, torch.float64):
        one = torch.full((1,), 0.5, dtype=dtype)
        for name in VML_OPS:
            getattr(torch, name)(one)


def _pointwise(workload, compile_kwargs, dev) -> TorchProgram:
    fn = twins.pointwise_fn(workload.name, workload.config)
    if compile_kwargs is not None:
        fn = torch.compile(fn, **compile_kwargs)
    inputs = _inputs(workload, workload.args, dev)
    return TorchProgram(_forward(fn, dev), inputs, False, None, None, dev)


def _forward(fn, dev) -> Callable[..., Ready]:
    def call(*inputs):
        with torch.no_grad():
            return Ready(fn(*inputs), dev)

    return call


def _model(workload, dev) -> torch.nn.Module:
    dtype = convert.torch_dtype(workload.dtype)
    param_dtype = torch.float32 if workload.mode == Mode.TRAIN else dtype
    with dev:
        model = twins.make_model(workload.name, workload.config, dtype, param_dtype)
    if workload.name == "resnet50":
        model = model.to(memory_format=torch.channels_last)
    state = workload.structured_state()
    if workload.mode == Mode.TRAIN:
        convert.load_flax_state(model, state["params"], state["batch_stats"])
    else:
        convert.load_flax_state(model, state)
    return model


def _inputs(workload, arrays, dev) -> tuple[torch.Tensor, ...]:
    tensors = tuple(convert.to_tensor(a, device=dev) for a in arrays)
    if workload.name == "resnet50":  # NHWC -> NCHW: a permuted view, channels-last in memory
        tensors = (tensors[0].permute(0, 3, 1, 2),)
    return tensors


def _train(workload, model, compile_kwargs, dev) -> TorchProgram:
    model.train()
    batch = workload.args[1]
    inputs = _inputs(workload, batch["inputs"], dev)
    targets = convert.to_tensor(batch["targets"], device=dev)
    lr = float(workload.config["learning_rate"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, **ADAMW)
    loss = twins.loss_fn(workload.name)

    def objective(xs, t):
        return loss(model(*xs), t)

    step = optimizer.step
    if compile_kwargs is not None:
        objective = torch.compile(objective, **compile_kwargs)
        step = torch.compile(optimizer.step)

    def call(token, batch):
        xs, t = batch
        optimizer.zero_grad(set_to_none=True)
        value = objective(xs, t)
        value.backward()
        step()
        return token, Ready(value.detach(), dev)

    return TorchProgram(call, (None, (inputs, targets)), True, model, optimizer, dev)


def host_outputs(program: TorchProgram, workload: Any, out: Any) -> Any:
    """One call's outputs in the form `xlafuse.measurement.numerics.judge_workload` compares.

    A forward call: the output on the host. A train step (the first one, from the Flax
    workload's initial state): loss, gradient, batch statistics and updated parameters, as
    trees shaped like the Flax state (layouts converted back).
    """
    if not program.train:
        return convert.to_numpy(out.value)
    _, ready = out
    state = workload.structured_state()
    tensors = program.tensors()
    return {
        "loss": convert.to_numpy(ready.value),
        "gradient": convert.to_flax(state["params"], program.gradients()),
        "batch_stats": convert.to_flax(state["batch_stats"], tensors),
        "params": convert.to_flax(state["params"], tensors),
    }
