/*
 * floor_interposer_fenced.c: the floor interposer (floor_interposer.c) stamping as the shim
 * does: an allocation with `lfence; rdtsc`, so that its stamp is never taken before the call
 * it follows has finished (BENCHMARKS.md, "the clock question": without the fence, stamps of
 * two threads handing an address over come out inverted), a free with a bare `rdtsc` (the
 * floor stamps it after the call; a bare stamp costs the same either side). The floor of a
 * design whose stamps order a free on one thread before the allocation of the same address
 * on another.
 * gpumemprof-build: shared-library link=dl cflags=-pthread,-DFLOOR_FENCED
 */
#include "floor_interposer.c"
