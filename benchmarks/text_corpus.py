"""A sparse text corpus built offline from the Python sources installed on this machine: the ``text`` design of
sparse_solvers.py.

    X, y, info = load_text_corpus()     # X: CSR float64 (documents x terms), y: float64 in {-1, 1}
    python benchmarks/text_corpus.py     # builds (or reads) the cache and prints shape, nnz, density, balance

Sources, each file in sorted order of its path relative to its root (nothing is downloaded):

    y = +1   numpy and scipy            (the install_requires of mpiopt)
    y = -1   scikit-learn and the stdlib (scikit-learn: the [test] and [bench] extras; the stdlib: the
             interpreter's own library, without site-packages and without its test suite, Lib/test)

The split is by package family, not by style: both classes are scientific Python with docstrings, tests and
numpy calls on the scikit-learn side too, so the classes overlap in vocabulary, and the two sides hold about
the same number of lines.  Files: ``.py``, ``.pyi``, ``.rst``, ``.txt`` and ``.md`` under each root.

Documents: each file's lines, in order, cut at the first blank line after at least ``chunk_lines`` non-blank
lines (or at ``4 * chunk_lines`` lines whatever comes), so a document is a function, a class's head or a few
paragraphs of a docstring; a file's remainder of fewer than 3 non-blank lines is dropped.

Features: scikit-learn's ``TfidfVectorizer`` with the settings of ``SETTINGS``: tokens are identifiers and
words of three or more characters, case kept; terms are these tokens and pairs of adjacent ones, the
``max_features`` = 66000 most frequent among those in at least ``min_df`` documents; sublinear tf, idf
smoothed, rows l2-normalized (scikit-learn's defaults).  Rows left with no term are dropped.

Cache: an ``.npz`` (no pickle) in ``$MPIOPT_CACHE_DIR`` or ``~/.cache/mpiopt``, named by a hash of the settings
and of the sources (every file's root-relative path, size and SHA-256, and the packages' versions), so a
machine with other versions builds its own and never reads another's.  On the 2-core machine (numpy 2.4.6,
scipy 1.17.1, scikit-learn 1.9.1, Python 3.11.7): 98932 x 66000, 4364982 nonzeros (density 6.7e-4), 54% of
the rows +1; built in 13 s (53 MB cached), read from the cache in 1.4 s (most of it hashing the sources).
L1 logistic on it is far from separable: 80% of the rows right at 0.1 lambda_max, 94% at 0.005.
"""
import hashlib
import importlib
import json
import os
import sys
import sysconfig
import time

import numpy as np

SUFFIXES = (".py", ".pyi", ".rst", ".txt", ".md")
POSITIVE = ("numpy", "scipy")           # y = +1
NEGATIVE = ("sklearn", "stdlib")        # y = -1
STDLIB_SKIP = ("site-packages", "test")  # other packages, and the stdlib's own test suite (half its lines)
SETTINGS = {"chunk_lines": 9, "token_pattern": r"\b[A-Za-z_][A-Za-z0-9_]{2,}\b", "lowercase": False,
            "ngram_range": [1, 2], "min_df": 2, "max_features": 66000, "sublinear_tf": True, "format": 1}


def source_roots():
    """{family: directory}: the installed packages' folders and the stdlib."""
    roots = {}
    for family in POSITIVE + NEGATIVE:
        if family == "stdlib":
            roots[family] = sysconfig.get_paths()["stdlib"]
        else:
            roots[family] = os.path.dirname(importlib.import_module(family).__file__)
    return roots


def source_files(root, skip=()):
    """The root's text files, sorted by their path relative to it (caches and the folders ``skip`` left out)."""
    found = []
    for directory, subdirectories, names in os.walk(root):
        top = directory == root
        subdirectories[:] = [name for name in subdirectories
                             if name != "__pycache__" and not (top and name in skip)]
        found += [os.path.relpath(os.path.join(directory, name), root) for name in names if name.endswith(SUFFIXES)]
    return sorted(found)


def chunks(text, chunk_lines):
    """The file's documents: runs of lines cut at a blank line after ``chunk_lines`` non-blank ones."""
    documents, current, filled = [], [], 0
    for line in text.splitlines():
        blank = not line.strip()
        if blank and filled >= chunk_lines or len(current) >= 4 * chunk_lines:
            documents.append("\n".join(current))
            current, filled = [], 0
        if not blank:
            current.append(line)
            filled += 1
    if filled >= 3:
        documents.append("\n".join(current))
    return documents


def read_sources():
    """([(label, file contents)], the sources' fingerprint) in the fixed order of POSITIVE + NEGATIVE, then paths.

    The fingerprint hashes every family's version and every file's root-relative path, size and SHA-256."""
    digest, contents = hashlib.sha256(), []
    for family, root in source_roots().items():
        label = 1.0 if family in POSITIVE else -1.0
        digest.update(f"{family} {version(family)}\n".encode())
        for relative in source_files(root, STDLIB_SKIP if family == "stdlib" else ()):
            with open(os.path.join(root, relative), "rb") as stream:
                raw = stream.read()
            digest.update(f"{relative} {len(raw)} {hashlib.sha256(raw).hexdigest()}\n".encode())
            contents.append((label, raw))
    return contents, digest.hexdigest()


def version(family):
    if family == "stdlib":
        return sys.version.split()[0]
    return importlib.import_module(family).__version__


def cache_dir():
    return os.environ.get("MPIOPT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mpiopt")


def cache_path(fingerprint, settings=SETTINGS):
    key = hashlib.sha256(json.dumps([settings, fingerprint], sort_keys=True).encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), f"text_corpus_{key}.npz")


def build(contents, settings=SETTINGS):
    """(X CSR float64, y in {-1, 1}) of the sources' contents, vectorized now."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    documents, labels = [], []
    for label, raw in contents:
        found = chunks(raw.decode("utf-8", errors="replace"), settings["chunk_lines"])
        documents += found
        labels += [label] * len(found)
    vectorizer = TfidfVectorizer(token_pattern=settings["token_pattern"], lowercase=settings["lowercase"],
                                 ngram_range=tuple(settings["ngram_range"]),
                                 min_df=settings["min_df"], max_features=settings["max_features"],
                                 sublinear_tf=settings["sublinear_tf"], dtype=np.float64)
    X = vectorizer.fit_transform(documents).tocsr()
    kept = np.flatnonzero(np.diff(X.indptr) > 0)
    return X[kept], np.array(labels)[kept]


def load_text_corpus(cache=True, settings=SETTINGS):
    """(X, y, info): X a CSR float64 matrix (documents x terms, sorted indices), y float64 in {-1, 1}, info a
    dict (shape, nnz, density, positive_fraction, cache path, whether it was read from the cache, seconds).

    With ``cache``, the matrix is read from (or written to) the cache named by the settings and sources."""
    import scipy.sparse as sp
    started = time.perf_counter()
    contents, fingerprint = read_sources()
    path = cache_path(fingerprint, settings)
    if cache and os.path.exists(path):
        with np.load(path, allow_pickle=False) as stored:
            X = sp.csr_matrix((stored["data"], stored["indices"], stored["indptr"]), shape=tuple(stored["shape"]))
            y = stored["y"]
        from_cache = True
    else:
        X, y = build(contents, settings)
        if cache:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            partial = f"{path}.{os.getpid()}.tmp.npz"  # another process may build the same corpus at once
            np.savez(partial, data=X.data, indices=X.indices, indptr=X.indptr, shape=np.array(X.shape), y=y)
            os.replace(partial, path)
        from_cache = False
    X.sort_indices()
    m, n = X.shape
    info = {"shape": [m, n], "nnz": int(X.nnz), "density": X.nnz / (m * n),
            "positive_fraction": float(np.mean(y > 0)), "sources": {"+1": list(POSITIVE), "-1": list(NEGATIVE)},
            "versions": {family: version(family) for family in POSITIVE + NEGATIVE},
            "settings": dict(settings), "fingerprint": fingerprint, "cache": path if cache else None,
            "from_cache": from_cache, "seconds": time.perf_counter() - started}
    return X, y, info


def describe(info):
    m, n = info["shape"]
    return (f"text corpus CSR {m} x {n}, nnz {info['nnz']}, density {info['density']:.2g}, "
            f"{100 * info['positive_fraction']:.0f}% numpy/scipy (+1) vs scikit-learn/stdlib (-1)")


if __name__ == "__main__":
    _, _, found = load_text_corpus(cache="--no-cache" not in sys.argv[1:])
    print(describe(found))
    print(json.dumps({key: value for key, value in found.items() if key != "settings"}, indent=1))
