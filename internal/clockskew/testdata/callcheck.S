/* long sb_call_check(void *fn, long a, long b, long *ret)
 * Calls fn(a, b) with known values in the SysV callee-saved registers
 * (rbx, rbp, r12-r15), stores fn's rax in *ret and returns a bitmask of
 * the registers fn failed to preserve (0 = all preserved). */
	.intel_syntax noprefix
	.text
	.globl sb_call_check
	.type sb_call_check, @function
sb_call_check:
	push rbx
	push rbp
	push r12
	push r13
	push r14
	push r15
	push rcx                     /* 7 pushes: rsp is 16-byte aligned */
	mov rax, rdi
	mov rdi, rsi
	mov rsi, rdx
	movabs rbx, 0x1111111111111111
	movabs rbp, 0x2222222222222222
	movabs r12, 0x3333333333333333
	movabs r13, 0x4444444444444444
	movabs r14, 0x5555555555555555
	movabs r15, 0x6666666666666666
	call rax
	pop rcx
	mov [rcx], rax
	xor eax, eax
	movabs rdx, 0x1111111111111111
	cmp rbx, rdx
	je 1f
	or eax, 1
1:	movabs rdx, 0x2222222222222222
	cmp rbp, rdx
	je 2f
	or eax, 2
2:	movabs rdx, 0x3333333333333333
	cmp r12, rdx
	je 3f
	or eax, 4
3:	movabs rdx, 0x4444444444444444
	cmp r13, rdx
	je 4f
	or eax, 8
4:	movabs rdx, 0x5555555555555555
	cmp r14, rdx
	je 5f
	or eax, 16
5:	movabs rdx, 0x6666666666666666
	cmp r15, rdx
	je 6f
	or eax, 32
6:	pop r15
	pop r14
	pop r13
	pop r12
	pop rbp
	pop rbx
	ret
	.size sb_call_check, .-sb_call_check
	.section .note.GNU-stack,"",@progbits
