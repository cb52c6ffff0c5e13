"""Exact earth mover's distance of one small transport problem: the transportation simplex, compiled.

The mover's rewards solve one problem per pair (about 19 x 19 points for WMS on CNN/DM summaries)
inside the compiled loop over a batch (`rewards.mover`), where POT would cost a Python call per pair.
The solver starts from the least-cost rule's basis (zero-cost cells first: mass two documents share
stays in place), then pivots by Dantzig's rule (block search on large problems), cutting the scan
short at a row good enough next to the last pivot, and re-hangs only the subtree that a pivot cuts
off. `scripts/bench_rewards.py --alternatives` compares its speed with POT's `emd_c` (the network simplex
behind `ot.emd2`); tests check its values against `ot.emd2`. Dantzig's rule can in theory cycle on degenerate
problems, so after `dantzig_pivots` pivots the solver switches to Bland's rule, which cannot.
"""
from __future__ import annotations

import numpy as np
from numba import njit

TOLERANCE = 1e-10  # optimal once no reduced cost is below -TOLERANCE: within 1e-10 of the optimum (mass 1)
MAX_PIVOTS = 100_000  # ot.emd2's default iteration limit
GOOD_ENOUGH = 0.6  # of the last pivot's reduced cost (tuned with scripts/bench_rewards.py --alternatives)


@njit(cache=True)
def _cheapest_cell_first_start(a, b, cost, edge_row, edge_col, flow):
    """A basic feasible solution by the least-cost rule: the cheapest cell of the rows and columns
    still open ships as much as it can. Each allocation closes one row or one column (both only at
    the end), so the n + m - 1 cells form a spanning tree of rows and columns (some may carry 0).
    Each row keeps its cheapest open column, looked for again only when that column closes; closed
    lines cost +inf rather than a test. Fewer pivots than rows, cheapest first, shipping to their cheapest
    columns."""
    n, m = a.shape[0], b.shape[0]
    supply, demand = a.copy(), b.copy()
    closed_col = np.zeros(m)  # +inf once closed
    row_best, row_best_col = np.empty(n), np.empty(n, np.int64)  # +inf once the row is closed
    for i in range(n):
        best, best_col = cost[i, 0], 0  # in locals, not the arrays: 20% of a solve
        for j in range(1, m):
            if cost[i, j] < best:
                best, best_col = cost[i, j], j
        row_best[i], row_best_col[i] = best, best_col
    rows_open, cols_open = n, m
    for k in range(n + m - 1):
        i, best = 0, row_best[0]
        for r in range(1, n):
            if row_best[r] < best:
                i, best = r, row_best[r]
        j = row_best_col[i]
        amount = min(supply[i], demand[j])
        edge_row[k], edge_col[k], flow[k] = i, j, max(amount, 0.0)
        supply[i] -= amount
        demand[j] -= amount
        if cols_open == 1 or (rows_open > 1 and supply[i] <= demand[j]):
            row_best[i] = np.inf
            rows_open -= 1
            continue
        closed_col[j] = np.inf
        cols_open -= 1
        for r in range(n):
            if row_best_col[r] == j and row_best[r] < np.inf:
                best, best_col = np.inf, -1
                for c in range(m):
                    if cost[r, c] + closed_col[c] < best:
                        best, best_col = cost[r, c] + closed_col[c], c
                row_best[r], row_best_col[r] = best, best_col


@njit(cache=True)
def _hang(root, n, cost, edge_row, edge_col, adjacency, degree, parent_edge, depth, potential, queue):
    """Parent edges, depths and potentials (u_i + v_j = c_ij on tree edges; u_i at node i, v_j at
    node n + j) of the subtree below `root`, whose own three are already set."""
    queue[0] = root
    head, tail = 0, 1
    while head < tail:
        x = queue[head]
        head += 1
        for s in range(degree[x]):
            e = adjacency[x, s]
            if e == parent_edge[x]:
                continue
            y = n + edge_col[e] if x < n else edge_row[e]
            potential[y] = cost[edge_row[e], edge_col[e]] - potential[x]
            parent_edge[y], depth[y] = e, depth[x] + 1
            queue[tail] = y
            tail += 1


@njit(cache=True)
def _link(x, e, adjacency, degree):
    adjacency[x, degree[x]] = e
    degree[x] += 1


@njit(cache=True)
def _unlink(x, e, adjacency, degree):
    for s in range(degree[x]):
        if adjacency[x, s] == e:
            degree[x] -= 1
            adjacency[x, s] = adjacency[x, degree[x]]
            return


@njit(cache=True)
def _entering_cell(cost, potential, n, bland, first_row, block, good_enough):
    """The entering cell and its reduced cost c_ij - u_i - v_j, or (-1, -1, -TOLERANCE) when none is
    below -TOLERANCE (optimal). Rows are scanned cyclically from `first_row`, each for its most
    negative cell; the scan stops at a row whose cell is below `good_enough`, or once `block` cells
    were seen and one was negative (block search, as in LEMON), else takes the best of all rows
    (Dantzig). With Bland's rule: the first negative cell from row 0."""
    m = cost.shape[1]
    v = potential[n:]
    best, p, q, scanned = -TOLERANCE, -1, -1, 0
    for t in range(n):
        i = t if bland else (first_row + t if first_row + t < n else first_row + t - n)  # not %: 4% of a solve
        row_min = np.inf
        for j in range(m):
            row_min = min(row_min, cost[i, j] - v[j])
        if row_min - potential[i] < best:
            best, p = row_min - potential[i], i
            for j in range(m):
                reduced = cost[i, j] - v[j]
                if (reduced - potential[i] < -TOLERANCE) if bland else (reduced == row_min):
                    q = j
                    break
            if bland or best < good_enough:
                break
        scanned += m
        if p >= 0 and scanned >= block:
            break
    return p, q, best


@njit(cache=True)
def transport_cost(a: np.ndarray, b: np.ndarray, cost: np.ndarray, dantzig_pivots: int = 10_000,
                   max_pivots: int = MAX_PIVOTS) -> float:
    """min <P, cost> over plans P >= 0 with row sums `a` [n] and column sums `b` [m] (equal masses),
    both non-empty. NaN if `max_pivots` pivots were not enough (never seen; the caller raises)."""
    n, m = a.shape[0], b.shape[0]
    nodes, edges = n + m, n + m - 1
    edge_row, edge_col, flow = np.empty(edges, np.int64), np.empty(edges, np.int64), np.empty(edges)
    _cheapest_cell_first_start(a, b, cost, edge_row, edge_col, flow)
    adjacency = np.empty((nodes, max(n, m)), np.int64)  # each node's tree edges, degree[x] of them
    work = np.zeros(6 * nodes, np.int64)
    degree, parent_edge, depth = work[:nodes], work[nodes:2 * nodes], work[2 * nodes:3 * nodes]
    queue, path = work[3 * nodes:4 * nodes], work[4 * nodes:]  # path: q side first, p side from `nodes`
    for e in range(edges):
        _link(edge_row[e], e, adjacency, degree)
        _link(n + edge_col[e], e, adjacency, degree)
    potential = np.zeros(nodes)
    parent_edge[0] = -1
    _hang(0, n, cost, edge_row, edge_col, adjacency, degree, parent_edge, depth, potential, queue)
    # Whole-matrix (Dantzig) pricing up to 1,024 cells; beyond, block search as in LEMON: pricing every
    # cell at each pivot made large problems slower than POT. A row at least GOOD_ENOUGH times as negative
    # as the last pivot's ends the scan: fewer cells priced for a few more pivots.
    block, first_row, last_reduced = max(1024, int(4 * np.sqrt(n * m))), 0, -np.inf
    for pivot in range(max_pivots + 1):
        bland = pivot >= dantzig_pivots
        p, q, last_reduced = _entering_cell(cost, potential, n, bland, first_row, block, GOOD_ENOUGH * last_reduced)
        first_row = (p + 1) % n
        if p < 0:
            total = 0.0
            for e in range(edges):
                total += flow[e] * cost[edge_row[e], edge_col[e]]
            return total
        if pivot == max_pivots:
            break
        # The cycle closed by (p, q): the tree paths from column q and from row p up to their common
        # ancestor. (p, q) gains theta; along each path, edges alternate -theta, +theta, ... from its
        # end. The leaving edge: least flow among the -theta edges (ties: lowest cell, under Bland).
        x, y = n + q, p
        length_q, length_p = 0, 0
        theta, leaving, leaving_on_q_side = np.inf, -1, True
        while x != y:
            on_q_side = depth[x] >= depth[y]
            if on_q_side:
                e = parent_edge[x]
                path[length_q] = e
                loses = length_q % 2 == 0
                length_q += 1
                x = edge_row[e] if x >= n else n + edge_col[e]
            else:
                e = parent_edge[y]
                path[nodes + length_p] = e
                loses = length_p % 2 == 0
                length_p += 1
                y = edge_row[e] if y >= n else n + edge_col[e]
            bland_tie_break = bland and flow[e] == theta and (
                edge_row[e] * m + edge_col[e] < edge_row[leaving] * m + edge_col[leaving])
            if loses and (flow[e] < theta or bland_tie_break):
                theta, leaving, leaving_on_q_side = flow[e], e, on_q_side
        for s in range(length_q):
            flow[path[s]] += -theta if s % 2 == 0 else theta
        for s in range(length_p):
            flow[path[nodes + s]] += -theta if s % 2 == 0 else theta
        # The leaving edge's slot becomes (p, q); the side it cut off hangs from (p, q) now.
        _unlink(edge_row[leaving], leaving, adjacency, degree)
        _unlink(n + edge_col[leaving], leaving, adjacency, degree)
        edge_row[leaving], edge_col[leaving], flow[leaving] = p, q, theta
        _link(p, leaving, adjacency, degree)
        _link(n + q, leaving, adjacency, degree)
        root, other = (n + q, p) if leaving_on_q_side else (p, n + q)
        parent_edge[root], depth[root] = leaving, depth[other] + 1
        potential[root] = cost[p, q] - potential[other]
        _hang(root, n, cost, edge_row, edge_col, adjacency, degree, parent_edge, depth, potential, queue)
    return np.nan
