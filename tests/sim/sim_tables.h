/*
 * sim_tables.h: the two hash tables behind the simulated memory model (sim_memory.c).
 *
 *   live table   address -> {size, kind, device} for every allocation not yet freed; it decides
 *                whether a free is valid and how much capacity the free gives back.
 *   free lists   per address window: rounded size -> stack of fake device addresses freed at
 *                that size, popped last-in first-out so a freed address comes back for the next
 *                allocation of the same size, the way a real allocator reuses addresses.
 *
 * Both are open-addressing tables with linear probing that double when 70% full. Neither locks:
 * the caller holds the model's one mutex. Zero is never a key (NULL is never live, a size is
 * never 0), so a zero key marks an empty slot.
 */
#ifndef GPUMEMPROF_SIM_TABLES_H
#define GPUMEMPROF_SIM_TABLES_H

#include <stddef.h>
#include <stdint.h>

/* Kinds of memory. The live table holds the first three; the last two only describe what a
 * pointer query found (a registered host range, a VMM mapping). */
enum sim_kind {
    SIM_DEVICE = 1,
    SIM_MANAGED = 2,
    SIM_PINNED_HOST = 3,
    SIM_REGISTERED_HOST = 4,
    SIM_VMM = 5
};

struct sim_block {
    uintptr_t ptr; /* key; 0 = empty slot */
    size_t size;   /* rounded size, the amount charged against capacity */
    int kind;      /* enum sim_kind */
    int device;    /* device charged; for pinned host memory, the device it was allocated from */
};

struct sim_live_table {
    struct sim_block *slots;
    size_t cap; /* a power of two, or 0 before the first insert */
    size_t len;
};

/* 0 on success, -1 if the table could not grow (out of host memory). ptr must not be live. */
int sim_live_insert(struct sim_live_table *t, struct sim_block b);
/* The live block starting exactly at ptr, or NULL. Valid until the next insert or remove. */
struct sim_block *sim_live_find(struct sim_live_table *t, uintptr_t ptr);
/* Removes a slot returned by sim_live_find. */
void sim_live_remove(struct sim_live_table *t, struct sim_block *slot);

struct sim_free_stack {
    size_t size; /* key; 0 = empty slot */
    uintptr_t *addrs;
    size_t len, cap;
};

struct sim_free_lists {
    struct sim_free_stack *slots;
    size_t cap; /* a power of two, or 0 before the first push */
    size_t len;
};

/* 0 on success, -1 out of host memory (the address is then simply never reused). */
int sim_free_push(struct sim_free_lists *f, size_t size, uintptr_t addr);
/* The most recently freed address of exactly this size, or 0 if there is none. */
uintptr_t sim_free_pop(struct sim_free_lists *f, size_t size);

#endif /* GPUMEMPROF_SIM_TABLES_H */
