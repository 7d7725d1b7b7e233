"""Pre-training on unlabeled images (`keras-vit pretrain`, issue 53): masked autoencoding, self-distillation, contrast.

- `mae`: the masked autoencoder (He et al. 2022), a plain ViT run on its visible patches and a
  light decoder; `hf`: its Hugging Face `vit_mae` folders, read and written; `mae_run`: its
  encoder for a budget, header line and figure in a run.
- `dino`: self-distillation (Caron et al. 2021), a student and its averaged teacher across views,
  on any keras_vit backbone; `dino_run`: its backbone, recipe and checkpoint in a run.
- `simclr`: contrastive learning (Chen et al. 2020), each view told apart from the batch's other
  views, on the same backbones with no teacher; `simclr_run`: its recipe, header and checkpoint.
- `run`: the run they share (data, budget, crash-safe fit, run directory), beside
  `keras_vit.transfer`, which adapts what it makes.
"""
