"""Training programs the training-pack tests run in fresh interpreters (no tests here).

Real torch and real mmengine on the CPU; nothing here is a fake. Each is
written to the scenario's temporary directory as a module.
"""

PLAIN_LOOP = """
import sys
import lazypatch.auto
import torch

def train(steps, optimizer_name="SGD", checkpoint=None, resume=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = getattr(torch.optim, optimizer_name)(model.parameters(), lr=0.01)
    if resume:
        optimizer.load_state_dict(torch.load(resume)["optimizer"])
    for step in range(1, steps + 1):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"completed step {step}", flush=True)
    if checkpoint:
        torch.save({"optimizer": optimizer.state_dict()}, checkpoint)
    print("LOOP FINISHED", flush=True)

if __name__ == "__main__":
    train(int(sys.argv[1]), *sys.argv[2:3], checkpoint=(sys.argv[3:4] or [None])[0],
          resume=(sys.argv[4:5] or [None])[0])
"""

MMENGINE_RUN = '''
"""A tiny mmengine training run on CPU."""
import sys
import lazypatch.auto
import torch
from mmengine.model import BaseModel
from mmengine.runner import Runner


class Tiny(BaseModel):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, inputs, labels=None, mode="tensor"):
        out = self.linear(inputs)
        if mode == "loss":
            return {"loss": ((out - labels) ** 2).mean()}
        return out


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        return dict(inputs=torch.randn(4, generator=generator),
                    labels=torch.randn(1, generator=generator))


def main(work_dir, loop, iterations, resume=False):
    if loop == "epoch":
        train_cfg = dict(by_epoch=True, max_epochs=iterations // 4)
        checkpoint = dict(type="CheckpointHook", interval=1, by_epoch=True)
    else:
        train_cfg = dict(type="IterBasedTrainLoop", max_iters=iterations)
        checkpoint = dict(type="CheckpointHook", interval=3, by_epoch=False)
    runner = Runner(
        model=Tiny(), work_dir=work_dir,
        train_dataloader=dict(dataset=Data(), batch_size=4, num_workers=0,
                              sampler=dict(type="DefaultSampler", shuffle=False),
                              collate_fn=dict(type="default_collate")),
        optim_wrapper=dict(optimizer=dict(type="SGD", lr=0.01)),
        train_cfg=train_cfg, default_hooks=dict(checkpoint=checkpoint),
        resume=resume, log_level="WARNING")
    runner.train()
    print(f"TRAINING FINISHED at iteration {runner.iter}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), resume=len(sys.argv) > 4)
'''
