/* Giving back a loop device the walls attached (docs/isolation.md "Loop devices given back"):
 * LOOP_CTL_GET_FREE makes a new device whenever none is free, and autoclear only detaches it,
 * so without this every instance that ever ran at once leaves a device on the host for good
 * (and every sysinfo() walks them all). Shared by the walls helper's tree and the engine, which
 * calls it for Lua (src/proc/loop_devices.c): which device and when is the program's to say. */
#ifndef SB_WALLS_LOOPS_H
#define SB_WALLS_LOOPS_H

/* Removes loop device n (LOOP_CTL_REMOVE). Returns 0, or -errno: -EBUSY while it is still
 * bound or open (its instance's mount not yet gone, or someone else's now: the kernel refuses
 * to remove either), -ENODEV when it no longer exists. */
int walls_loop_remove(int n);

#endif
