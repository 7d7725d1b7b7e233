"""keras_vit's benchmark harness: `python -m benchmarks <subcommand>` (list: `python -m benchmarks`).

Shared parts: `workloads` (the models and data every speed benchmark names), `timing` (the one
timing engine and median/range helpers), `workers` (the worker-process protocol and the JSONL
result format), `machine` (the machine record every result carries). Figures live in
benchmarks/RESULTS.md; benchmarks/README.md says which subcommand answers which question.
"""
