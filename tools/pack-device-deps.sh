#!/bin/bash
# Packs what the GPU machines lack (parallel HDF5 and cJSON, both from this machine's Debian
# packages) into DEST, to be carried there with the device tool. On the GPU machine:
#   cmake -DHDF5_ROOT=$PWD/DEST/phdf5 -DCJSON_ROOT=$PWD/DEST/cjson ...
#   export LD_LIBRARY_PATH=$PWD/DEST/phdf5/lib:$PWD/DEST/cjson/lib:$LD_LIBRARY_PATH
# Usage: tools/pack-device-deps.sh .device
set -euo pipefail
DEST=${1:?usage: pack-device-deps.sh DEST}
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/../shared/tools/pack-phdf5.sh" "$DEST/phdf5"
lib=$(ls /usr/lib/x86_64-linux-gnu/libcjson.so.*.*.* 2>/dev/null | head -1)
if [ ! -f /usr/include/cjson/cJSON.h ] || [ -z "$lib" ]; then
  echo "pack-device-deps: cJSON not installed here; run: apt-get install -y libcjson-dev" >&2
  exit 1
fi
rm -rf "$DEST/cjson"; mkdir -p "$DEST/cjson/include/cjson" "$DEST/cjson/lib"
cp /usr/include/cjson/cJSON.h "$DEST/cjson/include/cjson/"
cp -a "$lib" "$DEST/cjson/lib/"
soname=$(objdump -p "$lib" | awk '/SONAME/{print $2}')
ln -sf "$(basename "$lib")" "$DEST/cjson/lib/$soname"
ln -sf "$(basename "$lib")" "$DEST/cjson/lib/libcjson.so"
echo "packed cJSON into $DEST/cjson"
