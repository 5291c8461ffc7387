"""The GPT of mgraph-run's benchmarks in PyTorch, for the reference scripts
(bench/gpu_torch_reference.py, bench/torch_cpu_reference.py): pre-LN, learned positions,
GELU (tanh) MLP of 4h, tied embeddings, optional dropout after the embedding, the
attention probabilities and each residual branch, as mgraph's GPT-2 has it. A reference,
never a dependency of mgraph."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads, dropout=0.0):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
        self.heads, self.p = heads, dropout

    def forward(self, x):
        b, s, h = x.shape
        p = self.p if self.training else 0.0
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
        x = x + F.dropout(self.proj(y.transpose(1, 2).reshape(b, s, h)), p)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh")), p)


class GPT(nn.Module):
    def __init__(self, layers, h, heads, seq, vocab, dropout=0.0):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, h), nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads, dropout) for _ in range(layers))
        self.p = dropout
        self.lnf = nn.LayerNorm(h)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        x = F.dropout(x, self.p if self.training else 0.0)
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def model_flops(layers, h, seq, vocab, samples):
    # mg_gpt_flops: per token L(4h^2 + 4h*kv + 4h*ffn + 2sh) + 2hV (kv = h, ffn = 4h), x3, x tokens
    per_token = layers * (4 * h * h + 4 * h * h + 4 * h * 4 * h + 2 * seq * h) + 2 * h * vocab
    return 3.0 * per_token * seq * samples
