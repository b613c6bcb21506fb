"""The tuning space: configs checked against the factory, each with a stable identity.

    _values.py       plain config values, config_id, arrays of values (numpy imported lazily)
    types.py         Param, Space (configs by index, as value codes) and ListSpace
    constraints.py   Constraint: a safe expression or a callable a config must satisfy
    _expression.py   the constraint expressions, evaluated over arrays as Python would
    product.py       ProductSpace and product(): the lazy, constrained product and its scan
    resolve.py       configs= resolved and checked before any compile; defaults filled in
    prune.py         Triton's prune_configs_by, checked and applied
    _pass_configs.py a config's own TVM pass_configs, split off and merged
    view.py          SpaceView: the session's configs by search index and id

Nothing here imports torch or TVM; numpy only when a space is indexed.
"""

from tileauto.space._pass_configs import PASS_CONFIGS, merged_pass_configs, split_pass_configs
from tileauto.space._values import config_id
from tileauto.space.constraints import Constraint
from tileauto.space.product import MAX_CONSTRAINED_PRODUCT, ProductSpace, product
from tileauto.space.prune import PRUNE_KEYS, check_prune_configs_by, prune_space
from tileauto.space.resolve import (
    baseline_config,
    full_config,
    materialize,
    resolve_configs,
    tunable_parameters,
)
from tileauto.space.types import ListSpace, Param, Space, as_space

__all__ = [
    "MAX_CONSTRAINED_PRODUCT",
    "PASS_CONFIGS",
    "PRUNE_KEYS",
    "Constraint",
    "ListSpace",
    "Param",
    "ProductSpace",
    "Space",
    "as_space",
    "baseline_config",
    "check_prune_configs_by",
    "config_id",
    "full_config",
    "materialize",
    "merged_pass_configs",
    "product",
    "prune_space",
    "resolve_configs",
    "split_pass_configs",
    "tunable_parameters",
]
