"""A small deterministic JPEG data set in torchvision's ImageFolder layout, for the `real`
workload where no real data set is at hand.

    root/imagefolder-c4-n64-s256-v1/class_000/img_00000.jpg ...

The same parameters always give the same bytes (a seeded generator, fixed JPEG settings), so
runs on different days read the same data. The set is built in a temporary folder and renamed
into place, so concurrent builders (one per node on a shared filesystem) and interrupted runs
never leave a partial set where a complete one is expected.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

FORMAT_VERSION = 1
_MARKER = ".complete"


def dataset_path(root: str | os.PathLike, classes: int, per_class: int, size: int, seed: int) -> Path:
    """Where the set for these parameters lives: every parameter that changes the images is in
    the name, the seed too, so two sets never share a directory."""
    return Path(root) / f"imagefolder-c{classes}-n{per_class}-s{size}-seed{seed}-v{FORMAT_VERSION}"


def ensure_imagefolder(root: str | os.PathLike, classes: int, per_class: int, size: int, seed: int = 0) -> Path:
    """Return the data set for these parameters under `root`, building it once."""
    if classes < 1 or per_class < 1 or size < 16:
        raise ValueError(f"need classes >= 1, images per class >= 1, size >= 16; got {classes}, {per_class}, {size}")
    final = dataset_path(root, classes, per_class, size, seed)
    if (final / _MARKER).exists():
        return final
    import numpy as np
    from PIL import Image

    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=final.parent))
    try:
        yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
        for c in range(classes):
            cdir = tmp / f"class_{c:03d}"
            cdir.mkdir()
            for i in range(per_class):
                rng = np.random.default_rng([seed, c, i])
                # A class-coloured gradient with a random tilt and texture: compresses like a
                # photograph (neither flat colour nor pure noise), decodes at realistic cost.
                base = rng.uniform(0, 255, 3) * 0.5 + (c * 97 % 255) * 0.5
                tilt = rng.uniform(-1, 1, 2)
                field = (xx * tilt[0] + yy * tilt[1])[..., None] * 120
                noise = rng.normal(0, 18, (size, size, 3))
                pixels = np.clip(base + field + noise, 0, 255).astype(np.uint8)
                Image.fromarray(pixels, "RGB").save(cdir / f"img_{i:05d}.jpg", "JPEG", quality=90)
        (tmp / _MARKER).write_text(f"classes={classes} per_class={per_class} size={size} seed={seed}\n")
        try:
            os.rename(tmp, final)
        except OSError:
            # Someone else finished first (or a stale incomplete set is in the way).
            if not (final / _MARKER).exists():
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def count_images(path: str | os.PathLike) -> int:
    """Images in an ImageFolder tree, by the extensions torchvision accepts."""
    exts = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
    root = Path(path)
    return sum(1 for d in root.iterdir() if d.is_dir() for f in d.iterdir() if f.suffix.lower() in exts)
