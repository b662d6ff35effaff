//go:build !unix

package main

import "os/exec"

// killGroupOnCancel leaves cmd as it is: without process groups, the
// context kills the process alone and WaitDelay bounds the wait.
func killGroupOnCancel(*exec.Cmd) {}
