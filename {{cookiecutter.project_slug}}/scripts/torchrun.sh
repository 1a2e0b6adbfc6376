#!/usr/bin/env bash
# Multi-node DDP with torchrun: run this same command on every node.
#
#   NNODES=2 NPROC_PER_NODE=4 RDZV_ENDPOINT=node0.example.org:29500 RDZV_ID=exp42 \
#       scripts/torchrun.sh fit -c configs/default.yaml -c configs/ddp.yaml
#
# Rendezvous (torchrun's c10d backend): every node connects to RDZV_ENDPOINT, host:port of one of the
# nodes that all others can reach (the node whose hostname matches it hosts the store; open the port in
# the firewall). RDZV_ID names the job: the same on every node, new for every job. Node ranks are assigned
# at the rendezvous, so no node needs its own rank. torchrun sets RANK/WORLD_SIZE/MASTER_ADDR for each
# process; Lightning reads them (TorchElasticEnvironment) and starts no processes itself.
# Without a shared filesystem, only the node of global rank 0 writes the run directory.
set -euo pipefail
: "${NNODES:?set NNODES: the number of nodes}"
: "${NPROC_PER_NODE:?set NPROC_PER_NODE: processes (devices) per node}"
: "${RDZV_ENDPOINT:?set RDZV_ENDPOINT: host:port of the node that hosts the rendezvous}"
: "${RDZV_ID:?set RDZV_ID: a job id shared by all nodes}"
PYTHON=${PYTHON:-python}
PACKAGE=${PACKAGE:-$(basename "$(dirname "$(dirname "$0")"/../src/*/__init__.py)")}  # the package under src/

# Lightning must be told the same layout as torchrun (it checks devices x num_nodes against the world size).
exec "$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" --nproc-per-node="$NPROC_PER_NODE" \
    --rdzv-backend=c10d --rdzv-endpoint="$RDZV_ENDPOINT" --rdzv-id="$RDZV_ID" \
    -m "$PACKAGE" "$@" --trainer.num_nodes="$NNODES" --trainer.devices="$NPROC_PER_NODE"
