"""The corpus a placement policy learns from, and the problems it is judged on.

    training_items(seed, size)   -> an iterator of `CorpusItem` (graph, cluster, objective)
    held_out_items(seed, size)   -> a list of `CorpusItem` never seen in training
    sample_cluster(rng, n)       -> a `Cluster` of 2-8 devices around the catalogue
    write_cluster(cluster, path) -> a cluster TOML file (`--cluster path` takes it)

Graphs: the zoo's models and families of them through their export options (batch, sequence
length, depth, vocabulary; Llama-shaped decoders from 2 to 24 layers), layered random DAGs as
in the placement literature, and models from outside the zoo (`graphs/outside/`: a YOLO-style detector, a MobileNetV2-style classifier).
Clusters: the catalogue's, and clusters sampled around it (catalogue device models, heterogeneous,
PCIe/NVLink/NVSwitch/network links).

Held out (never in `training_items`):
- families: `transformer` (the zoo's GPT-2-style model at any options) and `outside` (the models
  from outside the zoo);
- clusters: `dgx1-v100` and `2x2gpu-25gbe`, and any sampled cluster with their hardware.

`size="small"` builds in seconds (small variants, exports cached in the zoo cache); `"full"` is
the corpus for pre-training and the generalisation benchmark; `held_out_items(seed, "large")` is
deep graphs never learned on (GPT-2-shaped at 24 and 48 layers, the Llama-2-7B shape), read for
their shapes alone.
"""

from placer.corpus.clusters import sample_cluster, write_cluster
from placer.corpus.items import (HELD_OUT_CLUSTERS, HELD_OUT_FAMILIES, CorpusItem, held_out_items,
                                 training_items)

__all__ = ["HELD_OUT_CLUSTERS", "HELD_OUT_FAMILIES", "CorpusItem", "held_out_items", "sample_cluster",
           "training_items", "write_cluster"]
