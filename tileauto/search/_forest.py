"""The guided search's model: a random forest of regression trees, grown in this thread."""

from __future__ import annotations

import importlib
from typing import Any

_MAX_FEATURES = 0.3  # the share of feature columns each split of a tree chooses among


class Forest:
    """scikit-learn's ``RandomForestClassifier(max_features=0.3, n_jobs=1)``, grown tree by
    tree in this thread: the same seeds and bootstrap samples, without its per-tree dispatch,
    which cost about as much as the trees on a few hundred rows. Each tree is a regression
    tree of the 0/1 label: for two classes its squared error is half the Gini impurity, so it
    makes the same splits and its leaves hold the same P(True) (checked to the last digit),
    without the classifier's per-tree check of the labels (a third of its fit time here).
    """

    def __init__(self, trees: int, seed: int) -> None:
        self.trees, self.seed = trees, seed
        self.estimators: list[Any] = []
        self.classes_: list[Any] = []

    def fit(self, rows: Any, labels: Any, sample_weight: Any = None) -> Forest:
        import numpy as np

        tree = importlib.import_module("sklearn.tree")  # the search extra
        n = len(rows)
        self.classes_ = sorted(set(labels.tolist()))
        share = None
        if sample_weight is not None:  # drawn in proportion to its weight, as scikit-learn does
            weight = np.asarray(sample_weight, dtype=np.float64)
            share = weight / weight.sum()
        x = np.ascontiguousarray(rows, dtype=np.float32)
        y = np.asarray(labels, dtype=np.float64)
        forest = np.random.RandomState(self.seed)  # as the forest seeds its trees
        for seed in [forest.randint(np.iinfo(np.int32).max) for _ in range(self.trees)]:
            draw = np.random.RandomState(seed)
            drawn = draw.randint(0, n, n) if share is None else draw.choice(n, n, p=share)
            model = tree.DecisionTreeRegressor(max_features=_MAX_FEATURES, random_state=seed)
            counts = np.bincount(drawn.astype(np.int32), minlength=n).astype(np.float64)
            # our rows are float32 and finite: the per-tree input checks are skipped
            self.estimators.append(model.fit(x, y, sample_weight=counts, check_input=False))
        return self

    def predict_proba(self, rows: Any) -> Any:
        """P(False), P(True) per row: the trees' leaf means, averaged."""
        import numpy as np

        x = np.ascontiguousarray(rows, dtype=np.float32)
        true = np.zeros(len(x))
        for model in self.estimators:
            true += model.tree_.predict(x).reshape(len(x))
        true /= max(len(self.estimators), 1)
        return np.stack([1.0 - true, true], axis=1)


def p_true(model: Any, rows: Any) -> Any:
    """P(class True) from a fitted classifier (1 or 0 when it saw one class only)."""
    import numpy as np

    classes = list(model.classes_)
    if True not in classes:
        return np.zeros(len(rows))
    if len(classes) == 1:
        return np.ones(len(rows))
    return model.predict_proba(rows)[:, classes.index(True)]
