module kura.dev/hack/control-plane/hostjournal

go 1.26.0
