#!/usr/bin/env bash
# fresh_pages.sh [DIR] [GIB] - how fast DIR (default /dev/shm) takes writes into memory the machine
# has not handed out since it started against memory a removed file has just freed: three files of
# GIB GiB (default 4) written by dd from /dev/zero in 16 MiB blocks and kept, then removed; then
# three more, each removed at once. GB/s of each write, and the memory the kernel reports before and
# after. On a virtual machine that is given its memory on first touch, the first three pay for it
# and the rest do not; frames that stay in memory are always written into fresh pages.
set -euo pipefail
dir=${1:-/dev/shm}
gib=${2:-4}
blocks=$((gib * 64))
gbs() { # FILE: GB/s of dd writing GIB GiB into FILE
  local t0 t1
  t0=$(date +%s.%N)
  dd if=/dev/zero of="$1" bs=16M count="$blocks" status=none
  t1=$(date +%s.%N)
  awk -v b="$((blocks * 16 * 1048576))" -v a="$t0" -v c="$t1" 'BEGIN { printf "%.2f", b / (c - a) / 1e9 }'
}
mem() { awk '/^MemTotal|^MemFree/ { printf "%s %d MiB  ", $1, $2 / 1024 }' /proc/meminfo; echo; }
mem
printf "fresh, kept (GB/s):   "
for i in 1 2 3; do printf " %s" "$(gbs "$dir/.fresh_pages_$i")"; done
echo
rm -f "$dir"/.fresh_pages_*
printf "freed, reused (GB/s): "
for i in 1 2 3; do
  printf " %s" "$(gbs "$dir/.fresh_pages_r$i")"
  rm -f "$dir/.fresh_pages_r$i"
done
echo
mem
