"""`keras-vit train`: a run of `keras_vit.training.trainer.train`, its flags declared in `keras_vit.train_options`."""

from __future__ import annotations

import os



def add(subparsers) -> None:
    from keras_vit import train_options

    parser = subparsers.add_parser(
        "train",
        help="train a ViT (default: a small ViT on the shipped Fashion-MNIST sample)",
        description=(
            "Train a ViT with model.fit. With no arguments: a small ViT on the Fashion-MNIST "
            "sample shipped in the package (a few minutes on a CPU), then prints the test "
            "accuracy and saves the model under saved_models/. Runs survive crashes: run the "
            "same command again and it resumes from the last completed epoch (or, if training "
            "had finished, writes only the final files). A header before training says what "
            "will run; arguments, output folders and memory are checked before the first step."
        ),
    )
    fit = train_options.add_train_flags(parser)["training"]
    # A multi-process JAX run: how this process joins it, not a setting of the run.
    fit.add_argument("--coordinator", help="host:port of process 0 of a multi-process JAX run (default: "
                     "KERAS_DISTRIBUTION_JOB_ADDRESSES, or the platform's, e.g. Cloud TPU)")
    fit.add_argument("--num-processes", type=int, help="processes of a multi-process JAX run "
                     "(default: KERAS_DISTRIBUTION_NUM_PROCESSES)")
    fit.add_argument("--process-id", type=int, help="this process's index, from 0 (default: KERAS_DISTRIBUTION_PROCESS_ID)")
    parser.add_argument("--overwrite", action="store_true", help="replace the <output-dir>/<name>.* files of an "
                        "earlier run (a run resumed from its backup rewrites its own without it)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from keras_vit import _validation, train_options

    for flag, value, minimum in (("--num-processes", args.num_processes, 1), ("--process-id", args.process_id, 0)):
        if value is not None:
            _validation.check_positive_int(flag, value, minimum)
    multi_process = args.num_processes is not None or os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES")
    if not multi_process and (args.process_id is not None or args.coordinator is not None):
        raise ValueError("--process-id and --coordinator describe a multi-process JAX run: pass --num-processes too.")
    if multi_process:
        from keras_vit import distribution

        distribution.initialize(args.coordinator, args.num_processes, args.process_id)  # before any computation

    from keras_vit.training.trainer import format_summary, train

    config = train_options.config_from_flags(args)
    _check_train_outputs(config, args.overwrite)
    # The options are checked once, by the run's plan, and named by their flags.
    result = train(config, name=train_options.flag_name)
    print(format_summary(result))
    for kind, path in result["artifacts"].items():
        print(f"Saved {kind}: {path}")
    return 0


def _check_train_outputs(config, overwrite):
    """The overwrite rule for `train`'s final files, before anything runs.

    A run that will resume from its run directory's backup wrote them itself (it was stopped
    while writing them, or after): it rewrites them without --overwrite.
    """
    if not config.output_dir:
        return
    from keras_vit._validation import check_new_files
    from keras_vit.training.artifacts import artifact_files
    from keras_vit.training.run_dir import RunDirectory

    if config.run_dir and config.resume and RunDirectory(config.run_dir).backup_state() is not None:
        return
    check_new_files(artifact_files(config.output_dir, config.name, config.export).values(), overwrite)
