from benchopt import BaseDataset

from benchmark_utils import problems


class Dataset(BaseDataset):
    """benchmarks/text_corpus.py's tf-idf corpus: about 99000 documents (functions, docstrings) of the
    installed numpy and scipy (y = +1) against scikit-learn and the stdlib (y = -1), 66000 unigram and
    bigram terms, CSR with l2-normalized rows; built offline once and cached (~/.cache/mpiopt).  It is
    sparse_solvers.py's ``text`` design: the rows in a seeded random order (sorted, each rank's block would
    hold one source alone).  The lasso regresses the labels themselves."""
    name = "text-tfidf"
    requirements = ["pip::scikit-learn"]
    parameters = {"seed": [0]}

    def get_data(self):
        X, y, labels = problems.design("text", seed=self.seed)
        return dict(X=X, y=y, labels=labels)
