"""Small copies of the ImageNet validation set in its real layouts, written by the tests:
JPEGs made from scikit-image's sample photos, in synset folders or flat
(``ILSVRC2012_val_%08d.JPEG``) with each accepted label file."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

from agraph import imagenet

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry")


def jpeg(photo: str, size=(96, 72)) -> bytes:
    """A scikit-image sample photo as a small RGB JPEG."""
    from PIL import Image
    from skimage import data

    image = np.asarray(getattr(data, photo)())[..., :3]
    buffer = io.BytesIO()
    Image.fromarray(image).resize(size, Image.BILINEAR).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def file_name(number: int) -> str:
    return f"ILSVRC2012_val_{number:08d}.JPEG"


def flat_copy(folder: Path, labels: Sequence[int]) -> Dict[str, int]:
    """Images 1..len(labels) flat in ``folder``; returns file name -> class index."""
    folder.mkdir(parents=True, exist_ok=True)
    truth = {}
    for number, label in enumerate(labels, 1):
        (folder / file_name(number)).write_bytes(jpeg(PHOTOS[(number - 1) % len(PHOTOS)]))
        truth[file_name(number)] = label
    return truth


def synset_copy(folder: Path, labels: Sequence[int]) -> Dict[str, int]:
    """The same images in synset folders (``<synset>/ILSVRC2012_val_....JPEG``)."""
    truth = flat_copy(folder, labels)
    for name, label in truth.items():
        target = folder / imagenet.synsets()[label]
        target.mkdir(exist_ok=True)
        (folder / name).rename(target / name)
    return truth


def pairs_file(path: Path, truth: Dict[str, int], synset_names: bool = False) -> Path:
    """A ``filename label`` file (labels as class indices, or as synsets)."""
    path.write_text("".join(f"{n} {imagenet.synsets()[i] if synset_names else i}\n" for n, i in truth.items()))
    return path


def loc_solution(path: Path, truth: Dict[str, int]) -> Path:
    """Kaggle's LOC_val_solution.csv: ImageId (no suffix), PredictionString with boxes."""
    rows = [f"{Path(n).stem},{imagenet.synsets()[i]} 10 20 30 40 {imagenet.synsets()[i]} 1 2 3 4"
            for n, i in truth.items()]
    path.write_text("ImageId,PredictionString\n" + "\n".join(rows) + "\n")
    return path


def devkit(folder: Path, truth: Dict[str, int], ids: List[int]) -> Path:
    """The devkit's data/ILSVRC2012_validation_ground_truth.txt and data/meta.mat: the
    synsets get ILSVRC2012_IDs ``ids`` (a permutation, as the devkit's order is not the
    sorted one); returns the ground-truth file."""
    from scipy.io import savemat

    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    wnids = imagenet.synsets()
    table = np.zeros(1000, dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O")])
    for index, ilsvrc_id in enumerate(ids):
        table[index] = (ilsvrc_id, wnids[index], f"class {index}")
    savemat(str(data / "meta.mat"), {"synsets": table})
    id_of = {index: ilsvrc_id for index, ilsvrc_id in enumerate(ids)}
    lines = [str(id_of[truth[n]]) for n in sorted(truth)]
    path = data / "ILSVRC2012_validation_ground_truth.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def tar_of(folder: Path, path: Path) -> Path:
    """``folder``'s files as a tar (as ILSVRC2012_img_val.tar: members at its top level)."""
    with tarfile.open(path, "w") as tar:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                tar.add(f, arcname=f.relative_to(folder).as_posix())
    return path
