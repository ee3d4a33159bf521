"""The lab's command groups as the `tiermem` command loads them (the `tiermem.cli` entry points in
lab/pyproject.toml): `tiermem eval` and `tiermem bench`, each with every subcommand attached."""

from __future__ import annotations

from tiermem_lab.benchmarks.commands import bench_app
from tiermem_lab.benchmarks.telemetry import telemetry_command
from tiermem_lab.evaluation.commands import eval_app
from tiermem_lab.evaluation.extraction import extraction_command
from tiermem_lab.evaluation.l0_train import l0_train_command
from tiermem_lab.evaluation.product_report import product_command

__all__ = ["bench_app", "eval_app"]

bench_app.command("telemetry")(telemetry_command)  # issue 15: the cost of tracing
eval_app.command("extraction")(extraction_command)  # issue 17: offline extraction
eval_app.command("product")(product_command)  # issue 50: the product question set
eval_app.command("l0-train")(l0_train_command)  # issue 50: the L0 decision model
