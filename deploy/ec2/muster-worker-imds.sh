#!/bin/sh
# SPDX-License-Identifier: MIT
#
# muster-worker-imds.sh NODE: writes /etc/muster/worker-NODE.env from the EC2 instance metadata
# (IMDSv2), so that muster-worker@NODE starts with its zone label and the pool that matches its
# capacity type.  Run before the worker as root (ExecStartPre=+, see docs/deploy.md); an example
# to adapt: pool names and label levels must match musterd's config.
#
# Environment: MUSTER_SPOT_POOL (default p5-spot), MUSTER_OD_POOL (default p5-od),
# MUSTER_EXTRA_ARGS (appended to MUSTER_WORKER_ARGS, e.g. "--label rack=r12"),
# MUSTER_IMDS (default http://169.254.169.254), MUSTER_ENV_DIR (default /etc/muster).
set -eu

node=${1:?usage: muster-worker-imds.sh NODE}
imds=${MUSTER_IMDS:-http://169.254.169.254}
dir=${MUSTER_ENV_DIR:-/etc/muster}

token=$(curl -sf --max-time 2 -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 60" \
    "$imds/latest/api/token")
md() {
    curl -sf --max-time 2 -H "X-aws-ec2-metadata-token: $token" "$imds/latest/meta-data/$1"
}
zone=$(md placement/availability-zone-id) # use1-az4: the same name in every account
lifecycle=$(md instance-life-cycle)        # "spot" or "on-demand"
if [ "$lifecycle" = spot ]; then
    pool=${MUSTER_SPOT_POOL:-p5-spot}
else
    pool=${MUSTER_OD_POOL:-p5-od}
fi

tmp=$(mktemp "$dir/.worker-$node.env.XXXXXX")
printf 'MUSTER_POOL=%s\nMUSTER_WORKER_ARGS=--label zone=%s %s\n' "$pool" "$zone" \
    "${MUSTER_EXTRA_ARGS:-}" >"$tmp"
chmod 0644 "$tmp"
mv "$tmp" "$dir/worker-$node.env"
echo "muster-worker-imds: node $node: pool $pool, zone $zone"
