module kura.dev/hack/control-plane/standin

go 1.26.0
