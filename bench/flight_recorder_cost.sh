#!/bin/sh
# The flight recorder's cost on small allreduces: `phalanx bench allreduce --sizes 4K` on 2
# ranks with recording on (default, 2000 entries) and off (TORCH_FR_BUFFER_SIZE=0), in turns
# (on off on off ...), each run's median latency; prints both medians and their ratio.
# Usage: bench/flight_recorder_cost.sh [PAIRS] [ITERS]   (PHALANX=path/to/phalanx)
set -eu
PAIRS=${1:-10}
ITERS=${2:-20000}
PHALANX=${PHALANX:-phalanx}
run() {
    env "$@" "$PHALANX" bench allreduce --nproc-per-node 2 --standalone --sizes 4K \
        --iters "$ITERS" 2>&1 | awk '/ 4K /{print $(NF-3)}'
}
on=""; off=""
i=0
while [ "$i" -lt "$PAIRS" ]; do
    on="$on $(run TORCH_FR_BUFFER_SIZE=2000)"
    off="$off $(run TORCH_FR_BUFFER_SIZE=0)"
    i=$((i + 1))
done
median() { printf '%s\n' $1 | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
m_on=$(median "$on"); m_off=$(median "$off")
echo "recording on  (us):$on"
echo "recording off (us):$off"
echo "median on $m_on us, off $m_off us, on/off $(echo "$m_on $m_off" | awk '{printf "%.4f", $1/$2}')"
