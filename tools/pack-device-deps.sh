#!/bin/bash
# Packs what the GPU machines lack (parallel HDF5, cJSON, and libpng with zlib's headers for the
# frame previews, all from this machine's Debian packages) into DEST, to be carried there with the
# device tool. On the GPU machine:
#   cmake -DHDF5_ROOT=$PWD/DEST/phdf5 -DCJSON_ROOT=$PWD/DEST/cjson -DPNG_ROOT=$PWD/DEST/png -DZLIB_ROOT=$PWD/DEST/png ...
#   export LD_LIBRARY_PATH=$PWD/DEST/phdf5/lib:$PWD/DEST/cjson/lib:$PWD/DEST/png/lib:$LD_LIBRARY_PATH
# (without the png folder drift still builds there, and refuses output.preview).
# Usage: tools/pack-device-deps.sh .device
set -euo pipefail
DEST=${1:?usage: pack-device-deps.sh DEST}
# parallel HDF5 (Debian's libhdf5-openmpi-dev) laid out as an HDF5 prefix: DEST/phdf5/include and lib
inc=/usr/include/hdf5/openmpi
h5=$(ls /usr/lib/x86_64-linux-gnu/libhdf5_openmpi.so.*.*.* 2>/dev/null | head -1)
if [ ! -d "$inc" ] || [ -z "$h5" ]; then
  echo "pack-device-deps: parallel HDF5 not installed here; run: apt-get install -y libhdf5-openmpi-dev" >&2
  exit 1
fi
rm -rf "$DEST/phdf5"; mkdir -p "$DEST/phdf5/include" "$DEST/phdf5/lib"
cp -aL "$inc"/. "$DEST/phdf5/include/"
cp -a "$h5" "$DEST/phdf5/lib/"
ln -sf "$(basename "$h5")" "$DEST/phdf5/lib/$(objdump -p "$h5" | awk '/SONAME/{print $2}')"
ln -sf "$(basename "$h5")" "$DEST/phdf5/lib/libhdf5.so"
echo "packed parallel HDF5 into $DEST/phdf5"
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
# libpng 1.6 and zlib (FindPNG needs zlib's headers and library too)
png=$(ls /usr/lib/x86_64-linux-gnu/libpng16.so.*.*.* 2>/dev/null | head -1)
z=$(ls /usr/lib/x86_64-linux-gnu/libz.so.*.*.* 2>/dev/null | head -1)
if [ ! -f /usr/include/png.h ] || [ ! -f /usr/include/zlib.h ] || [ -z "$png" ] || [ -z "$z" ]; then
  echo "pack-device-deps: libpng or zlib not installed here; run: apt-get install -y libpng-dev" >&2
  exit 1
fi
rm -rf "$DEST/png"; mkdir -p "$DEST/png/include" "$DEST/png/lib"
cp /usr/include/png.h /usr/include/pngconf.h /usr/include/pnglibconf.h /usr/include/zlib.h /usr/include/zconf.h \
  "$DEST/png/include/"
cp -a "$png" "$z" "$DEST/png/lib/"
for l in "$png" "$z"; do
  ln -sf "$(basename "$l")" "$DEST/png/lib/$(objdump -p "$l" | awk '/SONAME/{print $2}')"
done
ln -sf "$(basename "$png")" "$DEST/png/lib/libpng.so"
ln -sf "$(basename "$png")" "$DEST/png/lib/libpng16.so"
ln -sf "$(basename "$z")" "$DEST/png/lib/libz.so"
echo "packed libpng and zlib into $DEST/png"
