/* The one intrusive list: what a module has in flight (sleepers, processes, transfers,
 * connections, databases, jobs), kept so its shutdown callback can reach each. An element is
 * any struct with `prev` and `next` pointers to its own type; the list is a head pointer. And
 * the one FIFO append, for queues kept as a head and a tail (frames, queries).
 * Macros, as <sys/queue.h> is, because the element types differ; each argument is evaluated
 * more than once, so pass plain names. */
#ifndef SB_LIST_H
#define SB_LIST_H

#include <stddef.h>

/* Puts `node` first. */
#define SB_LIST_PUSH(head, node)                                                                   \
  do {                                                                                             \
    (node)->prev = NULL;                                                                           \
    (node)->next = (head);                                                                         \
    if ((head) != NULL)                                                                            \
      (head)->prev = (node);                                                                       \
    (head) = (node);                                                                               \
  } while (0)

/* True when `node` is on the list whose head is `head` (it may be any element). */
#define SB_LIST_LISTED(head, node) ((node)->prev != NULL || (head) == (node))

/* Takes `node` off and clears its links; nothing happens when it is not listed. */
#define SB_LIST_REMOVE(head, node)                                                                 \
  do {                                                                                             \
    if ((node)->prev != NULL)                                                                      \
      (node)->prev->next = (node)->next;                                                           \
    else if ((head) == (node))                                                                     \
      (head) = (node)->next;                                                                       \
    else                                                                                           \
      break;                                                                                       \
    if ((node)->next != NULL)                                                                      \
      (node)->next->prev = (node)->prev;                                                           \
    (node)->prev = (node)->next = NULL;                                                            \
  } while (0)

/* Appends `node` to a singly linked queue (elements with `next`) kept as a head and a tail. */
#define SB_QUEUE_APPEND(head, tail, node)                                                          \
  do {                                                                                             \
    (node)->next = NULL;                                                                           \
    if ((tail) != NULL)                                                                            \
      (tail)->next = (node);                                                                       \
    else                                                                                           \
      (head) = (node);                                                                             \
    (tail) = (node);                                                                               \
  } while (0)

#endif
