package main

func runBringup(args []string) error { return nil }
func runFaults(args []string) error  { return nil }
func runDetect(args []string) error  { return nil }
