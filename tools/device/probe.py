import sys, torch
sys.path.insert(0, "bench")
from models import make_model
import kiln
model, mk = make_model("hf_bert"); x = mk(1)
model = model.cuda(); x = x.cuda()
with torch.no_grad():
    ts = torch.jit.trace(model, x, check_trace=False, strict=False)
c = kiln.compile(ts, inputs=[x], device="cuda", progress=False)
print(c.kiln_summary[:2500])
print("\n".join(sorted(set(c.kiln_report["fallback"])))[:3000])
