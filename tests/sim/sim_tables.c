/*
 * sim_tables.c: open-addressing hash tables for the simulated memory model (see sim_tables.h).
 *
 * Linear probing keeps lookups to one or two cache lines; deletion from the live table shifts
 * later entries of the same probe run backwards instead of leaving tombstones, so a program that
 * allocates and frees millions of times never degrades the table.
 */
#include "sim_tables.h"

#include <stdlib.h>

#define INITIAL_CAP 1024 /* slots; a power of two so probing can mask instead of divide */

/* splitmix64's finaliser: fake device addresses differ only in a few middle bits, so they need
 * real mixing before masking. */
static size_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return (size_t)x;
}

/* True when inserting one more entry would push the load factor past 70%. */
static int needs_grow(size_t len, size_t cap)
{
    return cap == 0 || (len + 1) * 10 > cap * 7;
}

/* ---- live table ---------------------------------------------------------------------------- */

static struct sim_block *live_slot_for(struct sim_block *slots, size_t cap, uintptr_t ptr)
{
    size_t mask = cap - 1;
    size_t i = mix(ptr) & mask;
    while (slots[i].ptr != 0 && slots[i].ptr != ptr)
        i = (i + 1) & mask;
    return &slots[i];
}

static int live_grow(struct sim_live_table *t)
{
    size_t cap = t->cap ? t->cap * 2 : INITIAL_CAP;
    struct sim_block *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].ptr != 0)
            *live_slot_for(slots, cap, t->slots[i].ptr) = t->slots[i];
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

int sim_live_insert(struct sim_live_table *t, struct sim_block b)
{
    if (needs_grow(t->len, t->cap) && live_grow(t) != 0)
        return -1;
    *live_slot_for(t->slots, t->cap, b.ptr) = b;
    t->len++;
    return 0;
}

struct sim_block *sim_live_find(struct sim_live_table *t, uintptr_t ptr)
{
    if (t->cap == 0 || ptr == 0)
        return NULL;
    struct sim_block *slot = live_slot_for(t->slots, t->cap, ptr);
    return slot->ptr == ptr ? slot : NULL;
}

void sim_live_remove(struct sim_live_table *t, struct sim_block *slot)
{
    size_t mask = t->cap - 1;
    size_t hole = (size_t)(slot - t->slots);
    /* Walk the rest of the probe run; an entry may move into the hole only if the hole lies
     * between its home slot and where it sits now (cyclically), or lookups would miss it. */
    for (size_t j = (hole + 1) & mask; t->slots[j].ptr != 0; j = (j + 1) & mask) {
        size_t home = mix(t->slots[j].ptr) & mask;
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            t->slots[hole] = t->slots[j];
            hole = j;
        }
    }
    t->slots[hole].ptr = 0;
    t->len--;
}

/* ---- free lists ---------------------------------------------------------------------------- */

static struct sim_free_stack *free_slot_for(struct sim_free_stack *slots, size_t cap, size_t size)
{
    size_t mask = cap - 1;
    size_t i = mix(size) & mask;
    while (slots[i].size != 0 && slots[i].size != size)
        i = (i + 1) & mask;
    return &slots[i];
}

static int free_grow(struct sim_free_lists *f)
{
    size_t cap = f->cap ? f->cap * 2 : INITIAL_CAP;
    struct sim_free_stack *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i < f->cap; i++)
        if (f->slots[i].size != 0)
            *free_slot_for(slots, cap, f->slots[i].size) = f->slots[i];
    free(f->slots);
    f->slots = slots;
    f->cap = cap;
    return 0;
}

int sim_free_push(struct sim_free_lists *f, size_t size, uintptr_t addr)
{
    /* Stacks are never removed (an emptied one stays for its size to be reused), so a key
     * that is new is the only case that adds a slot. */
    struct sim_free_stack *s = f->cap ? free_slot_for(f->slots, f->cap, size) : NULL;
    if (!s || s->size == 0) {
        if (needs_grow(f->len, f->cap) && free_grow(f) != 0)
            return -1;
        s = free_slot_for(f->slots, f->cap, size);
        s->size = size;
        f->len++;
    }
    if (s->len == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        uintptr_t *addrs = realloc(s->addrs, cap * sizeof *addrs);
        if (!addrs)
            return -1;
        s->addrs = addrs;
        s->cap = cap;
    }
    s->addrs[s->len++] = addr;
    return 0;
}

uintptr_t sim_free_pop(struct sim_free_lists *f, size_t size)
{
    if (f->cap == 0)
        return 0;
    struct sim_free_stack *s = free_slot_for(f->slots, f->cap, size);
    if (s->size == 0 || s->len == 0)
        return 0;
    return s->addrs[--s->len];
}
