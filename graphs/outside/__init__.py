"""Models from outside the zoo: real architectures, written with torch, that placer is tested on
as a user's own export (`--graph model.onnx`), never by a zoo name."""
