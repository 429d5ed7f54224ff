#!/bin/bash
# prenoise generate --recipe ref2va-demo without OMP_WAIT_POLICY in the environment: this tree
# (sets PASSIVE for its own process) vs the previous commit's code (torch's default policy).
# Usage: NEW_SRC=src OLD_SRC=<a checkout of the previous commit>/src PYTHON=.venv/bin/python \
#   benchmarks/omp_wait_policy.sh   (the old checkout needs the built kernel copied into it)
for i in 1 2 3 4; do for arm in new old; do
  if [ $arm = new ]; then PP="$NEW_SRC"; else PP="$OLD_SRC"; fi
  s=$(date +%s.%N)
  env -u OMP_WAIT_POLICY PYTHONPATH=$PP HF_HUB_OFFLINE=1 "$PYTHON" -m prenoise generate --recipe ref2va-demo --out /tmp/omp-$arm.mp4 --quiet > /tmp/omp-$arm.log 2>&1
  e=$(date +%s.%N)
  d=$(grep -i "│ denoise" /tmp/omp-$arm.log | awk -F'│' '{print $3}' | tr -d ' ')
  echo "$arm total=$(echo "$e - $s" | bc | cut -c1-5) denoise=$d load=$(cut -d' ' -f1 /proc/loadavg)"
done; done
