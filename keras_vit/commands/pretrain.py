"""`keras-vit pretrain`: self-supervised pre-training on unlabeled images, MAE, DINO or SimCLR (`keras_vit.pretraining.run.pretrain`).

The flags it shares with `keras-vit train` are that command's own (`keras_vit.train_options.OPTIONS`: the
same spelling, help, type and choices); the rest are MAE's, DINO's and SimCLR's.
"""

from __future__ import annotations

import os

# The `keras-vit train` flags pretrain takes as they are, by option name.
_TRAIN_FLAGS = ("data_dir", "download", "on_corrupt", "max_train_examples", "image_size", "channels", "scaling",
                "epochs", "batch_size", "precision", "jit_compile", "seed", "resume")
_MODEL_FIELDS = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")


def add(subparsers) -> None:
    from keras_vit import train_options

    parser = subparsers.add_parser(
        "pretrain",
        help="pre-train a ViT on unlabeled images: masked autoencoding (MAE), self-distillation (DINO) or contrastive "
             "learning (SimCLR)",
        description=(
            "Pre-training on images without labels. --method mae (He et al. 2022): the encoder sees a random "
            "quarter of each image's patches, a light decoder predicts the rest; writes a Hugging Face ViT-MAE "
            "checkpoint folder and reconstructions.png in the run directory. --method dino (Caron et al. 2021): a "
            "student learns to match an averaged teacher across augmented views of each image; it takes any "
            "backbone, by default the model keras-vit train builds from scratch (the conv stem + ViT on small "
            "images), and writes the teacher's backbone as model.keras. --method simclr (Chen et al. 2020): each "
            "augmented view learns to pick out the other view of its image among the batch's, on the same backbones, "
            "with no teacher (the least work per image); writes the backbone as model.keras. Each folder (--output-dir) is what "
            "keras-vit train --weights adapts with few labels, and embed, fewshot and knn read. Runs survive crashes: "
            "the same command resumes. A header before the first step says every choice and why."),
    )
    data, model, training, output = (parser.add_argument_group(group) for group in ("data", "model", "training", "output"))
    groups = {"data": data, "model": model, "training": training, "output": output}
    data.add_argument("--dataset", required=True, help="a folder of images (flat, or in sub-folders whose names are "
                      "ignored; a folder with train/ ... sub-folders reads --split), 'sample', a Fashion-MNIST IDX "
                      "folder or a tensorflow-datasets name")
    model.add_argument("--method", choices=("mae", "dino", "simclr"), default="mae", help="mae: masked autoencoding of "
                       "a plain ViT; dino: self-distillation, any backbone; simclr: contrastive learning, any backbone, "
                       "the most passes in a budget (default: mae)")
    data.add_argument("--split", default="train", help="split of a tfds name or of split sub-folders (default: train)")
    for option_name in _TRAIN_FLAGS:
        option = train_options.OPTIONS[option_name]
        kwargs = {"help": option.flag.help, **option.flag.kwargs}
        if option.choices is not None:
            kwargs["choices"] = option.choices
        if "action" not in option.flag.kwargs or option_name == "resume":
            kwargs.setdefault("default", option.default)
        groups[option.flag.group].add_argument(option.flag_name, **kwargs)
    for field in _MODEL_FIELDS:
        model.add_argument("--" + field.replace("_", "-"), type=int, help=f"the encoder's {field.replace('_', ' ')} "
                           "(default: what --budget-minutes buys, else a 6-block ViT of width 192; patch: an 8x8 grid)")
    model.add_argument("--weights", metavar="SPEC", help="continue pre-training a checkpoint (a ViT-MAE folder with its "
                       "decoder, a .keras model, or any backbone keras-vit train --weights takes), with its own patch "
                       "and scaling")
    model.add_argument("--mask-ratio", type=float, help="share of the patches hidden, in (0, 1) (default: 0.75, or the "
                       "checkpoint's)")
    model.add_argument("--decoder", choices=("base", "small", "tiny", "test"),
                       help="MAE's decoder size (default: by the encoder's width; base is MAE's 512 wide, 8 blocks)")
    model.add_argument("--head", choices=("base", "small", "test"), help="DINO's or SimCLR's head (default: by the "
                       "backbone's width; base is DINO's 65,536 prototypes, SimCLR's 2048 wide)")
    model.add_argument("--local-views", type=int, metavar="N", help="DINO's small local views of each image at 3/7 of its "
                       "side, seen by the student only (default: none; 6 is DINO's multi-crop, for longer runs)")
    model.add_argument("--view-size", type=int, metavar="PX", help="SimCLR's views at this side, through the "
                       "backbone's layers at its own (a step costs less, so a budget makes more passes; default: the "
                       "backbone's side)")
    training.add_argument("--budget-minutes", type=float, help="stop after this many minutes, summed over resumed "
                          "parts; chooses the encoder for the data and fits the cosine to the measured pace")
    output.add_argument("--output-dir", default="pretrained", help="the checkpoint folder written at the end "
                        "(default: pretrained)")
    output.add_argument("--run-dir", default=os.path.join("runs", "pretrain"), help="logs, crash backup, history and "
                        "reconstructions.png (default: runs/pretrain)")
    output.add_argument("--overwrite", action="store_true", help="replace an existing --output-dir")
    output.add_argument("--quiet", action="store_true", help="one line per epoch instead of a progress bar")
    parser.set_defaults(func=run)


def run(args) -> int:
    from keras_vit.commands._shared import option_flag
    from keras_vit.pretraining.run import PretrainConfig, few_passes_note, pretrain

    config = PretrainConfig(
        dataset=args.dataset, split=args.split, data_dir=args.data_dir, download=args.download,
        on_corrupt=args.on_corrupt, max_train_examples=args.max_train_examples, image_size=args.image_size,
        channels=args.channels, scaling=args.scaling, model={f: getattr(args, f) for f in _MODEL_FIELDS},
        weights=args.weights, mask_ratio=args.mask_ratio, decoder=args.decoder, epochs=args.epochs,
        batch_size=args.batch_size, budget_seconds=args.budget_minutes * 60 if args.budget_minutes is not None else None,
        precision=args.precision, jit_compile={"auto": None, "on": True, "off": False}[args.jit_compile],
        seed=args.seed, run_dir=args.run_dir or None, output_dir=args.output_dir or None, resume=args.resume,
        overwrite=args.overwrite, verbose=2 if args.quiet else 1, method=args.method, head=args.head,
        local_views=args.local_views, view_size=args.view_size)
    result = pretrain(config, name=option_flag)
    loss = f", last epoch's loss {result['loss']:.4f}" if result["loss"] is not None else ""
    print(f"Pre-trained for {result['epochs_done']} epochs ({result['steps_done']} steps, {result['passes']:.3g} "
          f"pass{'' if result['passes'] == 1 else 'es'} over the {result['num_train_examples']:,} images) in {result['train_seconds']:.0f} s{loss}.")
    note = few_passes_note(result["passes"], args.method)
    if note:
        print(note)
    for kind, path in result["artifacts"].items():
        if path:
            print(f"Saved {kind}: {path}")
    if result["artifacts"].get("checkpoint"):
        print(f"Adapt it: keras-vit train --weights {result['artifacts']['checkpoint']} --dataset LABELLED_DATA")
    return 0

