/* config.h for building vkd3d 1.14 (from Wine 10) as a stand-alone PE d3d12.dll with mingw-w64.
 * Replaces libs/vkd3d/config.h, whose "#define PATH_MAX 1024" clashes with mingw's <limits.h>
 * (PATH_MAX 260 from <limits.h> is used instead).
 * Force-included (-include config.h) before anything else in every translation unit. */
#ifndef VKD3D_PE_CONFIG_H
#define VKD3D_PE_CONFIG_H

#define PACKAGE_NAME "vkd3d"
#define PACKAGE_STRING "vkd3d 1.14"
#define PACKAGE_VERSION "1.14"
#define SONAME_LIBVULKAN "vulkan-1.dll"

/* vkd3d accesses the D3D12 unions by name (.u.Transition, ...), as with Wine's
 * WINE_NO_NAMELESS_EXTENSION; mingw-w64's _mingw_mac.h would define these names empty
 * (it leaves them alone when __C89_NAMELESS is already defined). */
#define __C89_NAMELESS
#define __C89_NAMELESSSTRUCTNAME  s
#define __C89_NAMELESSSTRUCTNAME1 s1
#define __C89_NAMELESSSTRUCTNAME2 s2
#define __C89_NAMELESSSTRUCTNAME3 s3
#define __C89_NAMELESSSTRUCTNAME4 s4
#define __C89_NAMELESSSTRUCTNAME5 s5
#define __C89_NAMELESSUNIONNAME   u
#define __C89_NAMELESSUNIONNAME1  u1
#define __C89_NAMELESSUNIONNAME2  u2
#define __C89_NAMELESSUNIONNAME3  u3
#define __C89_NAMELESSUNIONNAME4  u4
#define __C89_NAMELESSUNIONNAME5  u5
#define __C89_NAMELESSUNIONNAME6  u6
#define __C89_NAMELESSUNIONNAME7  u7
#define __C89_NAMELESSUNIONNAME8  u8

#endif
