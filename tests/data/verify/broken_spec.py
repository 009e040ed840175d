import opgate

broken = opgate.Operator("broken", reference=lambda x: x, inputs=[opgate.TensorSpec("x", ("N",), kind="gaussian")],
                         dims={"N": [4]})
