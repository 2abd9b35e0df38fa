#!/bin/bash
# Two d3d12.dll from vkd3d 1.14 (libs/vkd3d of Debian trixie's Wine 10 source), with DXIL switched on, for Wine:
#   build.sh <wine_10.0~repack.orig.tar.xz> <work folder> <output d3d12.dll> <output native 16-bit d3d12.dll>
# The second is the first with native-16-bit.patch and structured-stride-2.patch: a device with native 16-bit shader
# ops (shader model 6.2), on which DirectML runs its DXIL kernels for 16-bit gathers.
# Run by `onnx-gather setup-directml`, which checks the tarball's SHA-256 first. Needs gcc-mingw-w64-x86-64, flex,
# bison, wine64-tools (widl) and libvulkan-dev. The files beside this script are ours: the D3D12 entry points
# (d3d12_main.c, d3d12.def), two fixes (enumerate-meta-commands.patch; heap-sized-set-layouts.patch: a shader-visible
# descriptor heap's Vulkan descriptor sets of the heap's own size, as lavapipe allocates a set whole for its layout),
# the two patches of the native 16-bit device and three small headers (include/).
set -euo pipefail
TARBALL=$1 B=$2 OUT=$3 OUT16=$4
FILES=$(cd "$(dirname "$0")" && pwd)
NATIVE16=("$FILES/native-16-bit.patch" "$FILES/structured-stride-2.patch")
CC=x86_64-w64-mingw32-gcc
export LC_ALL=C SOURCE_DATE_EPOCH=0

mkdir -p "$B/gen" "$B/obj" "$B/vk" "$B/wineinc/wine"
tar -xJf "$TARBALL" -C "$B" wine-10.0/libs/vkd3d wine-10.0/include
V=$B/wine-10.0/libs/vkd3d S=$B/wine-10.0/libs/vkd3d/libs/vkd3d-shader
rm "$V/config.h"  # its PATH_MAX clashes with mingw's: include/config.h stands in
for p in enumerate-meta-commands heap-sized-set-layouts; do patch -d "$V" -p1 --quiet < "$FILES/$p.patch"; done

# The D3D12 and DXGI headers from Wine 10's .idl files; the Khronos Vulkan headers alone (not /usr/include).
for f in d3d12 d3d12sdklayers d3d12shader d3dcommon dxgi dxgicommon dxgiformat dxgitype; do
    widl --nostdinc -I "$B/wine-10.0/include" -h -o "$B/gen/$f.h" "$B/wine-10.0/include/$f.idl"
done
ln -s /usr/include/vulkan /usr/include/vk_video "$B/vk/"
cp "$B/wine-10.0/include/wine/list.h" "$B/wine-10.0/include/wine/rbtree.h" "$B/wineinc/wine/"
(cd "$B/gen" && bison -d -o hlsl.tab.c "$S/hlsl.y" && bison -d -o preproc.tab.c "$S/preproc.y" \
    && flex -o hlsl.yy.c "$S/hlsl.l" && flex -o preproc.yy.c "$S/preproc.l")

export CC B CFLAGS="-O2 -Werror=implicit-function-declaration -include config.h -DWINE_NO_NAMELESS_EXTENSION
    -DLIBVKD3D_SOURCE -DLIBVKD3D_SHADER_SOURCE -DLIBVKD3D_UTILS_SOURCE -DVKD3D_SHADER_UNSUPPORTED_DXIL
    -I$FILES/include -I$B/gen -I$B/vk -I$B/wineinc -I$V/include -I$V/include/private -I$V/libs/vkd3d -I$S"
compile() { local d=$(dirname "$1"); exec $CC $CFLAGS -c "$1" -o "$B/obj/${d##*/}_$(basename "${1%.c}").o"; }
export -f compile
# The C files Wine's libs/vkd3d/Makefile.in lists, the four grammars' and d3d12_main.c, two at a time.
{ sed -n "s|^\t\(libs/.*\.c\).*|$V/\1|p" "$V/Makefile.in"; ls "$B"/gen/*.c; echo "$FILES/d3d12_main.c"; } \
    | sort | xargs -P 2 -n 1 bash -c 'compile "$0"'
link() {
    $CC -shared -s -static-libgcc -Wl,--no-insert-timestamp -o "$1" "$FILES/d3d12.def" $(ls "$B"/obj/*.o | sort) \
        -ldxgi -luuid -lole32
}
link "$OUT"
# The native 16-bit device: the patches applied, the files they change compiled again, linked again.
for p in "${NATIVE16[@]}"; do patch -d "$V" -p1 --quiet < "$p"; done
sed -n "s|^+++ b/\([^\t]*\).*|$V/\1|p" "${NATIVE16[@]}" | sort -u | xargs -P 2 -n 1 bash -c 'compile "$0"'
link "$OUT16"
