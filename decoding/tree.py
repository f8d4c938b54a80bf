"""Candidate trees: several draft continuations verified in one target forward pass.

Candidates that share a beginning are merged into a trie. The target reads the last committed token
(the root) and every tree node at once; a tree attention mask lets each node attend to the cached
prefix, the root and its own ancestors only, and each node's position id is the cached length plus
its depth, so every node's logits equal those of a plain forward pass over its own branch
(SpecInfer, Miao et al. 2024, section 4; Medusa, Cai et al. 2024, section 2.1.2).

Verification walks down from the root. At each node the next token is drawn from the target's
distribution there (its argmax when greedy); if a child carries that token, the walk moves to it,
otherwise that token ends the round. Because the candidates are deterministic (n-gram lookups: q is
one-hot), this is exactly sampling from the target token by token. Testing each candidate branch on
its own with the chain rule and keeping the best would not be: it favours tokens that appear in
several branches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decoding.sampling import sample


@dataclass(frozen=True)
class DraftTree:
    """A trie of draft tokens, nodes in creation order (a parent always comes before its children).

    ``parents[i]`` is the index of node i's parent, or -1 for a child of the root (the last committed
    token, which the verify pass feeds first).
    """

    tokens: tuple[int, ...]  # (T,) token id per node
    parents: tuple[int, ...]  # (T,) parent index per node, -1 = root

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents):
            raise ValueError("tokens and parents differ in length")
        for index, parent in enumerate(self.parents):
            if not -1 <= parent < index:
                raise ValueError(f"node {index} has parent {parent}; parents must come first")

    def paths(self) -> list[list[int]]:
        """The tokens from the root to each verify row's position: ``[]`` for row 0 (the root), then
        node i's branch (its ancestors' tokens and its own) for row i + 1."""
        branches: list[list[int]] = []
        for token, parent in zip(self.tokens, self.parents):
            branches.append((branches[parent] if parent >= 0 else []) + [token])
        return [[], *branches]

    @classmethod
    def from_candidates(cls, candidates: list[list[int]], max_nodes: int) -> "DraftTree":
        """Merge candidate continuations (best first) into a trie of at most ``max_nodes`` nodes.

        A candidate that does not fit whole is cut to the nodes that fit.
        """
        tokens: list[int] = []
        parents: list[int] = []
        children: dict[tuple[int, int], int] = {}  # (parent, token) -> node
        for candidate in candidates:
            parent = -1
            for token in candidate:
                node = children.get((parent, token))
                if node is None:
                    if len(tokens) >= max_nodes:
                        break
                    node = len(tokens)
                    tokens.append(token)
                    parents.append(parent)
                    children[(parent, token)] = node
                parent = node
        return cls(tuple(tokens), tuple(parents))

    def __len__(self) -> int:
        return len(self.tokens)

    def depths(self) -> list[int]:
        """Depth of each node: 1 for the root's children."""
        depth: list[int] = []
        for parent in self.parents:
            depth.append(1 if parent < 0 else depth[parent] + 1)
        return depth

    def child_map(self) -> dict[int, dict[int, int]]:
        """node (-1: the root) -> {token: child node index}."""
        children: dict[int, dict[int, int]] = {}
        for index, (token, parent) in enumerate(zip(self.tokens, self.parents)):
            children.setdefault(parent, {})[token] = index
        return children

    def children(self, node: int) -> dict[int, int]:
        """token -> child node index, for ``node`` (-1: the root)."""
        return self.child_map().get(node, {})

    def chain(self) -> bool:
        """Whether the tree is a single branch."""
        return all(parent == index - 1 for index, parent in enumerate(self.parents))


def tree_attention(tree: DraftTree, past_length: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention mask and position ids for feeding [root, *tree.tokens] after ``past_length`` cached tokens.

    Returns:
        ``mask``: ``(1, 1, T + 1, past_length + T + 1)`` additive mask (0 = attend, dtype's minimum =
        masked); ``position_ids``: ``(1, T + 1)`` long.
    """
    size = len(tree) + 1
    minimum = torch.finfo(dtype).min
    mask = torch.full((size, past_length + size), minimum, dtype=dtype, device=device)
    mask[:, :past_length] = 0
    mask[0, past_length] = 0  # the root sees itself
    ancestors: list[list[int]] = [[0]]
    for index, parent in enumerate(tree.parents, start=1):
        ancestors.append(ancestors[parent + 1] + [index])
    for row, columns in enumerate(ancestors):
        mask[row, [past_length + c for c in columns]] = 0
    depths = [0, *tree.depths()]
    positions = torch.tensor([[past_length + d for d in depths]], device=device)  # (1, T + 1)
    return mask[None, None], positions


@dataclass(frozen=True)
class TreeVerifyResult:
    """The accepted branch: node indices from the root down, and the token that ends the round."""

    path: list[int]
    next_token: int


def tree_verify(target_logits: torch.Tensor, target_probs: torch.Tensor | None, tree: DraftTree,
                generator: torch.Generator | None) -> TreeVerifyResult:
    """Walk the tree with the target: at each node take the target's token (argmax when
    ``target_probs`` is None, else a sample from it) and follow the child that carries it.

    Args:
        target_logits: ``(T + 1, V)`` logits; row 0 is the root's (the last committed token), row
            i + 1 node i's.
        target_probs: ``(T + 1, V)`` float32 processed distributions for sampling, or ``None`` for greedy.
        generator: random source when sampling.
    Raises:
        ValueError: if the row count is not ``len(tree) + 1``.
    """
    if target_logits.shape[0] != len(tree) + 1:
        raise ValueError(f"expected {len(tree) + 1} rows of logits, got {target_logits.shape[0]}")
    children = tree.child_map()
    path: list[int] = []
    node = -1
    while True:
        row = node + 1
        token = int(target_logits[row].argmax()) if target_probs is None else sample(target_probs[row], generator)
        child = children.get(node, {}).get(token)
        if child is None:
            return TreeVerifyResult(path, token)
        path.append(child)
        node = child
