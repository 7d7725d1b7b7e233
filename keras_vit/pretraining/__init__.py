"""Pre-training on unlabeled images (`keras-vit pretrain`, issue 53): masked autoencoding and self-distillation.

- `mae`: the masked autoencoder (He et al. 2022), a plain ViT run on its visible patches and a
  light decoder; `hf`: its Hugging Face `vit_mae` folders, read and written.
- `dino`: self-distillation (Caron et al. 2021), a student and its averaged teacher across views,
  on any keras_vit backbone; `dino_run`: its backbone, recipe and checkpoint in a run.
- `run`: the run both share (data, budget, crash-safe fit, run directory), beside
  `keras_vit.transfer`, which adapts what it makes.
"""
