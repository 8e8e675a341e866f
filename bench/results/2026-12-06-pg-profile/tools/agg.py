#!/usr/bin/env python3
"""agg.py SCRIPTFILE [LABEL]: aggregate `perf script -F pid,ip,sym,dso` (dwarf callchains)
of PostgreSQL backends into categories (self time, attributed to the nearest caller a rule
names) and inclusive shares of key functions. Static functions of the stripped Debian
binary are named by the exported symbol before them: '~after:NAME'."""
import sys, bisect, collections, re
import os
# Exported symbols of a stripped binary (nm -D --defined-only postgres | sort), for naming static
# functions '~after:X'; not needed with a binary that has its symbols (PGSYMS unset: none).
syms = [(int(l.split()[0], 16), l.split()[1]) for l in open(os.environ['PGSYMS'])] if os.environ.get('PGSYMS') else []
addrs = [s[0] for s in syms]
def near(a):
    i = bisect.bisect_right(addrs, a) - 1
    return '~after:' + syms[i][1] if i >= 0 else '~?'

def parse(path):
    samples = []
    cur = None
    for line in open(path, errors='replace'):
        if not line.strip():
            if cur is not None: samples.append(cur); cur = None
            continue
        if not line.startswith('\t') and not line.startswith(' ' * 8):
            cur = []
            continue
        m = re.match(r'\s*([0-9a-f]+) (.*) \((.*)\)\s*$', line)
        if not m: continue
        ip, sym, dso = m.groups()
        if sym.startswith('[unknown]') and dso.endswith('/postgres'):
            sym = near(int(ip, 16))
        sym = re.sub(r'\+0x[0-9a-f]+$', '', sym)
        if dso.startswith('[kernel'): sym = 'k:' + sym
        elif not dso.endswith('/postgres'): sym = dso.rsplit('/', 1)[-1].split('.so')[0] + ':' + sym
        if cur is not None: cur.append(sym)
    if cur: samples.append(cur)
    return samples

# category rules: walk from the leaf up, the first frame that matches decides.
R = [
 ('connect/auth (new connections)', r'^(ClientAuthentication|InitPostgres|BackendStartup|PerformAuthentication|CheckSASLAuth|pg_hmac)'),
 ('WAL: CRC', r'^pg_comp_crc32c'),
 ('WAL: insertion (XLogInsert, record assembly, copy to WAL buffers)', r'^(CopyXLogRecordToWAL|ReserveXLogInsertLocation|WALInsertLock|XLogInsert|XLogInsertRecord|XLogRegister|XLogBeginInsert|XLogRecordAssemble|XLogResetInsertion|log_heap_|~after:XLogInsertRecord|~after:XLogInsert$|~after:XLogRegisterBufData|~after:XLogResetInsertion|XLogEnsureRecordSpace|GetXLogBuffer|~after:XLogCheckpointNeeded)'),
 ('WAL: flush/write at commit (XLogFlush, XLogWrite, kernel write)', r'^(XLogFlush|XLogWrite|XLogBackgroundFlush|issue_xlog_fsync|~after:XLogFlush)'),
 ('locking: LWLock', r'^(LWLock|~after:LWLock)'),
 ('locking: heavyweight lock manager', r'^(LockAcquire|LockRelease|LockRelationOid|UnlockRelation|LockTuple|XactLockTableWait|LockBuffer|ConditionalLockBuffer|~after:LockAcquire|LockReleaseAll|GrantLock|LockCheckConflicts|SetupLockInTable|~after:LockRelease|VirtualXactLock|~after:GrantLock|FastPath|~after:LockHeldByMe|LockRelid|ConditionalLockRelationOid)'),
 ('NOTIFY (Async_Notify, PreCommit_Notify, listen queue)', r'^(Async_Notify|PreCommit_Notify|AtCommit_Notify|ProcessCompletedNotifies|pg_notify|asyncQueue|~after:Async_|~after:AtCommit_Notify|~after:PreCommit_Notify|SignalBackends|~after:pg_notify)'),
 ('trigger / PL/pgSQL', r'^(plpgsql_|exec_stmt|~after:plpgsql|ExecCallTriggerFunc|AfterTrigger|ExecAR|ExecBR|ExecAS|ExecBS|afterTrigger|~after:AfterTrigger|TriggerEnabled|~after:ExecBR|~after:ExecAR|GetTupleForTrigger|SPI_|_SPI|~after:SPI_|~after:_SPI|~after:plpgsql_)'),
 ('btree: bottom-up/simple index deletion (heap_index_delete_tuples, _bt_delitems, killitems)', r'^(heap_index_delete_tuples|_bt_bottomupdel_pass|_bt_delitems_delete|_bt_simpledel_pass|~after:heap_index_delete_tuples|_bt_killitems|~after:_bt_bottomupdel_pass|_bt_dedup_pass|~after:_bt_dedup|index_compute_xid_horizon|table_index_delete_tuples|~after:_bt_simpledel_pass)'),
 ('btree: insertion (_bt_doinsert, search for the leaf, split)', r'^(_bt_doinsert|_bt_search|_bt_binsrch_insert|_bt_compare|_bt_mkscankey|_bt_insertonpg|_bt_findinsertloc|_bt_check_unique|_bt_split|_bt_moveright|_bt_getroot|_bt_relandgetbuf|_bt_getbuf|_bt_relbuf|btinsert|index_insert|~after:_bt_doinsert|~after:_bt_binsrch_insert|~after:_bt_mkscankey|_bt_keep_natts|index_form_tuple|~after:btinsert|_bt_lockbuf|_bt_unlockbuf|_bt_checkpage|_bt_pageinit|~after:_bt_pageinit)'),
 ('index insertion: ExecInsertIndexTuples (predicates, FormIndexDatum)', r'^(ExecInsertIndexTuples|FormIndexDatum|~after:ExecInsertIndexTuples|ExecCheckIndexConstraints)'),
 ('btree: scans (index lookups of claim/finish)', r'^(_bt_first|_bt_next|_bt_readpage|_bt_checkkeys|_bt_steppage|_bt_endpoint|btgettuple|btgetbitmap|_bt_preprocess|btbeginscan|btrescan|btendscan|index_getnext|index_fetch_heap|index_beginscan|index_rescan|index_endscan|index_getbitmap|~after:_bt_parallel|~after:_bt_first|~after:_bt_next|~after:_bt_checkkeys|~after:_bt_preprocess|_bt_start_array|_bt_advance_array|~after:btgettuple|index_getnext_slot|heapam_index_fetch|heap_hot_search_buffer|~after:heap_hot_search_buffer|~after:index_getnext|IndexNext|ExecIndexScan|~after:ExecIndexScan|~after:IndexNext|ExecReScanIndexScan|ExecIndexEvalRuntimeKeys|BitmapHeapNext|~after:BitmapHeapNext|heapam_scan_bitmap|tbm_|~after:tbm_|MultiExecBitmapIndexScan)'),
 ('heap: update (heap_update, new version, HOT test)', r'^(heap_update|simple_heap_update|heapam_tuple_update|~after:heap_update|HeapDetermineColumnsInfo|~after:HeapDetermineColumnsInfo|heap_page_prune|~after:heap_page_prune|heap_prune|RelationGetBufferForTuple|~after:RelationGetBufferForTuple|toast_tuple_init|heap_toast_insert_or_update|~after:heap_toast_insert_or_update|ExtractReplicaIdentity|~after:ExtractReplicaIdentity|table_tuple_update)'),
 ('heap: insert (heap_insert, heap_multi_insert)', r'^(heap_insert|heapam_tuple_insert|heap_multi_insert|~after:heap_insert|heap_prepare_insert|~after:heap_prepare_insert|table_tuple_insert)'),
 ('heap: delete', r'^(heap_delete|heapam_tuple_delete|~after:heap_delete|simple_heap_delete)'),
 ('heap: row lock (heap_lock_tuple: FOR UPDATE SKIP LOCKED)', r'^(heap_lock_tuple|heapam_tuple_lock|~after:heap_lock_tuple|compute_new_xmax|~after:compute_new_xmax|ExecLockRows|~after:ExecLockRows|table_tuple_lock|MultiXact)'),
 ('heap: tuple formation/deform (heap_form_tuple, slot deform, toast flatten)', r'^(fill_val|slot_deform_heap_tuple|heap_form_tuple|heap_fill_tuple|heap_compute_data_size|heap_form_minimal|heap_deform_tuple|slot_getsomeattrs|~after:toast_datum_size|~after:ExecScanReScan|toast_build_flattened_tuple|heap_copytuple|ExecFetchSlotHeapTuple|ExecCopySlot|tts_|~after:tts_|slot_deform|heap_getattr|nocachegetattr|~after:nocachegetattr|ExecStoreBufferHeapTuple|ExecStoreMinimalTuple|ExecStoreHeapTuple|ExecMaterializeSlot|minimal_tuple_from|heap_copy_tuple_as_datum|heap_tuple_fetch_attr|heap_tuple_untoast|detoast_attr|~after:detoast_attr|ExecFetchSlotMinimalTuple|MakeTupleTableSlot|ExecClearTuple|heap_freetuple|ExecForceStoreHeapTuple)'),
 ('heap: visibility, buffer access (ReadBuffer, pin, HeapTupleSatisfies)', r'^(ReadBuffer|ReleaseBuffer|ReleaseAndReadBuffer|~after:ReadBuffer|~after:BufTableDelete|PinBuffer|UnpinBuffer|~after:PinBuffer|~after:UnpinBuffer|MarkBuffer|BufTable|HeapTupleSatisfies|~after:HeapTupleSatisfies|heap_fetch|~after:heap_fetch|ResourceOwner|~after:ResourceOwner|TransactionIdIsCurrentTransactionId|TransactionIdDidCommit|TransactionLog|TransactionIdIsInProgress|XidInMVCCSnapshot|~after:XidInMVCCSnapshot|heap_page_prune_opt|BufferGetBlockNumber|IncrBufferRefCount|~after:IncrBufferRefCount|GetPrivateRefCount|~after:ReleaseBuffer|heapgetpage|heapgettup|~after:heapgettup|heap_getnextslot|SetHintBits|HeapTupleSetHintBits|BufferIsPermanent|MarkBufferDirtyHint|ForgetPrivateRefCountEntry|~after:ForgetPrivateRefCountEntry|LockBufHdr|~after:LockBufHdr|WaitBufHdrUnlocked|ConditionalLockBufferForCleanup)'),
 ('partition routing (ExecFindPartition: history insert)', r'^(ExecFindPartition|~after:ExecFindPartition|ExecInitPartitionInfo|ExecSetupPartitionTupleRouting|~after:ExecSetupPartitionTupleRouting|ExecCleanupTupleRouting|get_partition_for_tuple|~after:get_partition_for_tuple|FormPartitionKeyDatum|RelationGetPartitionDesc|PartitionDirectory|ExecGetRootToChildMap|partition_)'),
 ('parse / analyze / rewrite', r'^(pg_parse_query|raw_parser|base_yyparse|~after:base_yyparse|parse_analyze|transform|pg_analyze_and_rewrite|QueryRewrite|~after:transform|core_yylex|~after:core_yylex|scanner_|pg_rewrite_query|RewriteQuery|AcquireRewriteLocks)'),
 ('planning', r'^(pg_plan_query|planner|standard_planner|subquery_planner|grouping_planner|query_planner|create_plan|~after:create_plan|set_plan_references|~after:set_plan_references|make_one_rel|~after:make_one_rel|preprocess_|~after:preprocess_|get_relation_info|~after:get_relation_info|cost_|~after:cost_|add_path|create_index_path|build_index_paths|~after:build_index_paths|match_clause|~after:match_clause|eval_const_expressions|~after:eval_const_expressions|estimate_|clauselist_selectivity|~after:clauselist|restriction_selectivity|BuildCachedPlan|~after:BuildCachedPlan|choose_custom_plan|GetCachedPlan|~after:GetCachedPlan|RevalidateCachedQuery|~after:RevalidateCachedQuery|CheckCachedPlan|expression_tree_mutator|~after:expression_tree_mutator|build_simple_rel|setup_simple_rel|predicate_implied_by|predicate_refuted_by|~after:predicate_|get_cheapest|add_partial|create_seqscan|set_base_rel|set_rel|generate_|~after:generate_|extract_|~after:extract_|index_pages_fetched|btcostestimate|genericcostestimate|~after:genericcostestimate|check_index_predicates|~after:check_index_predicates|make_rel_from_joinlist|ExecCreatePartitionPruneState|ExecInitPartitionPruning|~after:ExecInitPartitionPruning|prune_append_rel_partitions|~after:prune_append_rel_partitions|get_matching_partitions|~after:get_matching_partitions|expand_inherited|~after:expand_inherited|expand_partitioned|~after:expand_partitioned)'),
 ('executor: startup/shutdown (ExecInitNode, ExecEndNode, portals)', r'^(ExecutorStart|standard_ExecutorStart|InitPlan|ExecInit|~after:ExecInit|ExecEnd|~after:ExecEnd|ExecutorEnd|standard_ExecutorEnd|ExecReady|~after:ExecReady|ExecBuildProjectionInfo|ExecAssignProjection|ExecOpenIndices|ExecCloseIndices|ExecOpenScanRelation|~after:ExecBuildProjectionInfo|PortalStart|PortalDrop|CreatePortal|ExecutorFinish|~after:ExecComputeSlotInfo|ExecComputeSlotInfo|ExecBuildAggTrans|ExecPushExprSlots|~after:ExecPushExprSlots|ExecCreateExprSetupSteps|ExecCheckRTPerms|ExecCheckPermissions|ExecGetRangeTableRelation|~after:ExecGetRangeTableRelation|ExecInitRangeTable|ExecConditionalAssignProjectionInfo|ExecBuildUpdateProjection|~after:ExecBuildUpdateProjection|ExecAssignExprContext|CreateExprContext|FreeExprContext|FreeExecutorState|CreateExecutorState|~after:ExecBuildUpdateProjection|ExecGetUpdateNewTuple|ExecInitExpr|ExecInitQual|ExecPrepareExpr)'),
 ('executor: run (expression eval, nodes, sort, CTE, functions)', r'^(ExecInterpExpr|~after:ExecEvalAggOrderedTransTuple|ExecEval|~after:ExecEval|ExecScan|~after:ExecScan|ExecProcNode|ExecModifyTable|~after:ExecModifyTable|ExecUpdate|~after:ExecUpdate|ExecDelete|~after:ExecDelete|ExecInsert|~after:ExecInsert|ExecProject|ExecQual|ExecSort|tuplesort|~after:tuplesort|tuplestore|~after:tuplestore|ExecCteScan|~after:ExecCteScan|ExecMaterial|ExecHash|~after:ExecHash|MultiExecHash|ExecScanHashBucket|ExecNestLoop|~after:ExecNestLoop|ExecAgg|~after:ExecAgg|ExecFunctionScan|~after:ExecFunctionScan|ExecMakeTableFunctionResult|~after:ExecMakeTableFunctionResult|ExecResult|ExecLimit|~after:ExecLimit|ExecTidScan|~after:ExecTidScan|TidNext|ExecAppend|~after:ExecAppend|ExecProcessReturning|ExecLockRows|ExecSubPlan|~after:ExecSubPlan|ExecSetParamPlan|ExecGetJunk|ExecFilterJunk|ExecuteQuery|ExecutorRun|standard_ExecutorRun|~after:standard_ExecutorRun|ExecMergeJoin|ExecHashJoin|~after:ExecHashJoin|ExecValuesScan|ExecProjectSet|~after:ExecProjectSet|ExecSeqScan|ExecBitmap|ExecMaterializeSlot|ExecGetResultSlotOps|ExecConstraints|ExecPartitionCheck|ExecGetInsertNewTuple|ExecGetReturningSlot|ExecGetExtraUpdatedCols|ExecInitStoredGenerated|ExecComputeStoredGenerated|~after:ExecComputeStoredGenerated|ExecIRUpdateTriggers|ExecCrossPartitionUpdate|ExecPendingInserts|ExecBatchInsert|array_|~after:array_|construct_|deconstruct_array|~after:deconstruct_array|ExecEvalArrayExpr|ScalarArrayOp|jsonb|~after:jsonb|JsonbValue|pushJsonbValue|~after:pushJsonbValue|convertToJsonb|~after:convertToJsonb|datum_image_eq|nextval|~after:nextval|timestamp|~after:timestamp|uuid|~after:uuid|text|~after:text|int4|int8|bool|~after:bool|hash_uint32|texteq|~after:texteq|bttextcmp|varstr_cmp|~after:varstr_cmp|FunctionCall|OidFunctionCall|fmgr|~after:fmgr|DirectFunctionCall|now|GetCurrentTimestamp|~after:GetCurrentTimestamp|interval|~after:interval|numeric|~after:numeric|ExecScanFetch|ExecJustAssign|~after:ExecJustAssign|ExecAggTrans|advance_|~after:advance_|enum|~after:enum|ExecCopySlot|ExecCallTriggerFunc|~after:ExecFetchSlotHeapTuple|ExecUpdateAct|~after:ExecUpdateAct|ExecDeleteAct|~after:ExecDeleteAct|ExecOnConflict|ExecCheckTIDVisible|ExecProcNodeFirst|ExecProcNodeInstr|MultiExecProcNode|ExecReScan|ExecMergeAppend|~after:ExecMergeAppend|ExecUnique|~after:ExecUnique|ExecGather|slot_getattr|ExecTypeFromTL|ExecAssignResultType|ExecCleanTypeFromTL|ExecModifyTable|ExecPrepareTuplestoreResult|~after:ExecPrepareTuplestoreResult|ExecSetSlotDescriptor|ExecLookupResultRelByOid|ExecGetTriggerResultRel|heap_tuple_from_minimal)'),
 ('protocol, portal, send results (Bind/Execute, printtup, pq_*)', r'^(pq_|~after:pq_|printtup|~after:printtup|exec_bind_message|~after:exec_bind_message|exec_execute_message|exec_parse_message|~after:exec_parse_message|exec_describe|exec_simple_query|~after:exec_simple_query|PortalRun|~after:PortalRun|secure_read|secure_write|socket_|~after:socket_|ReadCommand|~after:ReadCommand|SendRowDescription|~after:SendRowDescription|PostgresMain|~after:PostgresMain|CreateDestReceiver|EndCommand|BeginCommand|ReadyForQuery|SetRemoteDestReceiverParams|~after:SetRemoteDestReceiverParams|OidOutputFunctionCall|OidReceiveFunctionCall|ReceiveFunctionCall|OutputFunctionCall|SendFunctionCall|~after:SendFunctionCall|getTypeBinaryInputInfo|getTypeOutputInfo|getTypeInputInfo|getTypeBinaryOutputInfo|record_|~after:record_|array_recv|array_send|~after:array_send|~after:array_recv|enlargeStringInfo|appendBinaryStringInfo|initStringInfo|pgstat_report_activity|~after:pgstat_report_activity|pg_client_to_server|pg_server_to_client|pg_verify_mbstr|~after:pg_verify_mbstr|pg_utf8_verifystr|~after:pg_utf8|pg_mbstrlen|check_log_duration|~after:check_log_duration|errdetail_params|~after:errdetail_params|proc_exit|shmem_exit|die|ProcessInterrupts|ProcessClientReadInterrupt)'),
 ('transaction start/commit (CommitTransaction, snapshots, xid)', r'^(CommitTransaction|~after:CommitTransaction|StartTransaction|~after:StartTransaction|CommitTransactionCommand|StartTransactionCommand|AbortTransaction|AbortCurrentTransaction|~after:AbortCurrentTransaction|GetSnapshotData|~after:GetSnapshotData|GetTransactionSnapshot|GetNewTransactionId|~after:GetNewTransactionId|AssignTransactionId|~after:AssignTransactionId|RecordTransactionCommit|~after:RecordTransactionCommit|ProcArrayEndTransaction|~after:ProcArrayEndTransaction|TransactionIdCommitTree|TransactionIdSetTreeStatus|~after:TransactionIdSetTreeStatus|CommandCounterIncrement|AtEOXact|AtEOXact_|~after:AtEOXact|AtCommit|AtStart|ResourceOwnerRelease|~after:ResourceOwnerRelease|PopActiveSnapshot|PushActiveSnapshot|RegisterSnapshot|UnregisterSnapshot|SnapshotResetXmin|~after:SnapshotResetXmin|pgstat_|~after:pgstat_|ExtendCLOG|~after:ExtendCLOG|SimpleLru|~after:SimpleLru|PreCommit_|smgr|~after:smgr|xact_redo|XactLogCommitRecord|~after:XactLogCommitRecord|SyncRepWaitForLSN|~after:SyncRepWaitForLSN|set_config_option|~after:set_config_option|AtEOXact_GUC|~after:AtEOXact_GUC|NewGUCNestLevel|ProcessGUC|~after:set_config|GUC|~after:GUC|guc_|~after:guc_|parse_int|parse_real|call_string_check_hook|~after:call_string|CopySnapshot|~after:CopySnapshot|GetLatestSnapshot|InvalidateCatalogSnapshot|AcceptInvalidationMessages|~after:AcceptInvalidationMessages|ReceiveSharedInvalidMessages|~after:ReceiveSharedInvalidMessages|LocalExecuteInvalidationMessage|AtEOXact_Inval|~after:AtEOXact_Inval|SIGetDataEntries|~after:SIGetDataEntries|PrepareToInvalidate|CacheInvalidate|~after:CacheInvalidate)'),
 ('catalog/relcache/syscache lookups', r'^(SearchCatCache|~after:SearchCatCache|SearchSysCache|~after:SearchSysCache|RelationIdGetRelation|~after:RelationIdGetRelation|RelationClose|relation_open|relation_close|table_open|table_close|index_open|index_close|~after:RelationClose|RelationGetIndexList|RelationGetIndexExpressions|RelationGetIndexPredicate|~after:RelationGetIndexPredicate|RelationBuild|~after:RelationBuild|get_func|get_typ|get_opfamily|get_attnum|get_rel|get_op|~after:get_op|~after:get_typ|~after:get_func|lookup_type_cache|~after:lookup_type_cache|fmgr_info|~after:fmgr_info|ReleaseCatCache|ReleaseSysCache|~after:ReleaseCatCache|CatalogCache|~after:CatalogCache|SysCacheGetAttr|RangeVarGetRelid|~after:RangeVarGetRelid|LookupTypeName|LookupFuncName|func_|~after:func_|FuncnameGetCandidates|~after:FuncnameGetCandidates|RelnameGetRelid|get_namespace|pg_class_aclcheck|~after:pg_class_aclcheck|pg_attribute_aclcheck|has_privs_of_role|object_aclcheck|aclmask|~after:aclmask|pg_aclmask|~after:pg_aclmask|InitCatCache|CatCacheRemove|hash_search_with_hash_value|~after:hash_search_with_hash_value|hash_search|hash_bytes|~after:hash_bytes|hash_any|string_hash|tag_hash|uint32_hash|oid_hash|hash_seq|~after:hash_seq|hash_get_num|RelationCacheInvalidate|RelationFlush|~after:RelationFlush|RelationGetPartitionKey|RelationGetFKeyList|CheckRelationLockedByMe|CheckTableNotInUse|RelationIncrementReferenceCount|RelationDecrementReferenceCount|~after:RelationIncrementReferenceCount|~after:RelationDecrementReferenceCount|RelationGetStatExtList|get_attribute_options)'),
 ('memory (palloc, memory contexts)', r'^(AllocSet|palloc|pfree|repalloc|MemoryContext|~after:MemoryContext|AllocSet|~after:AllocSet|Generation|~after:Generation|Slab|~after:Slab|~after:load_tzoffsets|~after:SlabContextCreate|pstrdup|pnstrdup|~after:palloc|~after:pfree|~after:repalloc|libc:__memset|libc:__memcpy|libc:__memmove|libc:_int_malloc|libc:malloc|libc:free|libc:_int_free|libc:cfree|libc:__libc_malloc|libc:__GI___libc_malloc|libc:__GI___libc_free|libc:malloc_consolidate|libc:__libc_free)'),
 ('node copy/walk (copyObject, expression_tree_walker)', r'^(copyObject|~after:copyObject|_copy|~after:_copy|expression_tree_walker|~after:expression_tree_walker|equal|~after:equal|_equal|list_|~after:list_|lappend|~after:lappend|lcons|~after:lcons|bms_|~after:bms_|makeNode|make|~after:make|exprType|exprTypmod|exprCollation|~after:exprType|~after:exprCollation|planstate_tree_walker|~after:planstate_tree_walker|query_tree_walker|range_table_walker|fix_opfuncids|~after:fix_opfuncids|contain_|~after:contain_|pull_|~after:pull_|raw_expression_tree_walker|~after:raw_expression_tree_walker)'),
 ('kernel: network I/O, scheduling', r'^(k:)'),
]
RC = [(n, re.compile(p)) for n, p in R]

INCL = ['heap_update','heap_insert','heap_delete','heap_lock_tuple','ExecInsertIndexTuples','_bt_doinsert',
 'heap_index_delete_tuples','XLogInsert','XLogInsertRecord','pg_comp_crc32c_sse42','XLogFlush','CommitTransaction','RecordTransactionCommit',
 'ExecARUpdateTriggers','ExecARInsertTriggers','ExecBRInsertTriggers','ExecBRUpdateTriggers','AfterTriggerEndQuery','AfterTriggerFireDeferred','ExecCallTriggerFunc','plpgsql_call_handler',
 'Async_Notify','PreCommit_Notify','AtCommit_Notify','pg_notify',
 'pg_parse_query','pg_analyze_and_rewrite_fixedparams','pg_plan_query','GetCachedPlan','BuildCachedPlan','exec_parse_message','exec_bind_message','exec_execute_message','exec_simple_query',
 'standard_ExecutorStart','standard_ExecutorRun','standard_ExecutorEnd','ExecModifyTable','ExecFindPartition','ExecLockRows',
 'LWLockAcquire','LockAcquireExtended','set_config_option','ClientAuthentication','InitPostgres','ProcessCompletedNotifies','ProcessClientReadInterrupt', 'heap_page_prune_opt', 'heap_page_prune', 'ExecUpdate','ExecDelete','ExecInsert','ExecLockRows','ExecInterpExpr','AllocSetAlloc','CopyXLogRecordToWAL','XLogRecordAssemble','ReserveXLogInsertLocation','heap_form_tuple','heap_form_minimal_tuple','fill_val','slot_deform_heap_tuple','tuplestore_puttupleslot','ExecHashTableInsert','_bt_bottomupdel_pass','_bt_simpledel_pass','_bt_killitems','_bt_search','_bt_findinsertloc','_bt_check_unique','_bt_insertonpg','_bt_split','_bt_compare','index_form_tuple','LWLockAttemptLock','LWLockRelease','AfterTriggerSaveEvent','plpgsql_exec_trigger','exec_stmt_execsql','SPI_execute_plan_with_paramlist','_SPI_execute_plan','AfterTriggerExecute','nextval_internal','ExecScanHashBucket','ExecHashJoin','tuplesort_puttupleslot','tuplesort_performsort','ProcessUtility','standard_ProcessUtility','exec_bind_message','PortalRunMulti','printtup','SendFunctionCall','jsonb_in','jsonb_recv','jsonb_send','array_recv','pg_plan_queries','RevalidateCachedQuery','AcquireExecutorLocks','ExecInitNode','ExecEndNode','InitPlan','ExecFindPartition','ExecInitPartitionInfo','ExecSetupPartitionTupleRouting','pg_notify','Async_Notify','PreCommit_Notify','AtCommit_Notify','SignalBackends','asyncQueueAddEntries']

def main():
    path = sys.argv[1]
    s = parse(path)
    n = len(s)
    cats = collections.Counter(); leaf = collections.Counter(); incl = collections.Counter()
    uncatleaf = collections.Counter()
    for st in s:
        if not st: continue
        leaf[st[0]] += 1
        c = None
        for f in st:
            for name, rc in RC:
                if rc.search(f):
                    c = name; break
            if c: break
        if c is None:
            c = 'other'; uncatleaf[' < '.join(st[:4])] += 1
        cats[c] += 1
        seen = set(st)
        for f in INCL:
            if f in seen: incl[f] += 1
    stm = collections.Counter()
    for st in s:
        k = 'outside the executor (protocol, parse/plan, commit, idle)'
        if 'ExecDelete' in st or 'ExecInsert' in st: k = 'executor: a statement that deletes/inserts (FinishRuns: DELETE + history INSERT; event INSERTs)'
        elif 'ExecUpdate' in st or 'ExecLockRows' in st or 'TidNext' in st: k = 'executor: a statement that updates/locks (Claim; FinishRuns updates for retries)'
        elif 'standard_ExecutorRun' in st or 'ExecutorRun' in st: k = 'executor: other statements (reads, set_config, NextDue, PromoteDue)'
        stm[k] += 1
    print(f'samples: {n} (at 997 Hz: {n/997:.2f} s of CPU)')
    print('\n## categories (self time, each sample attributed to the nearest frame, from the leaf up, that a rule names)\n')
    for k, v in cats.most_common(): print(f'{100*v/n:6.2f}%  {v:6d}  {k}')
    print('\n## samples by kind of statement (from the executor frames on the stack)\n')
    for k, v in stm.most_common(): print(f'{100*v/n:6.2f}%  {v:6d}  {k}')
    print('\n## inclusive (share of samples with the function anywhere on the stack)\n')
    for f in INCL:
        if incl[f]: print(f'{100*incl[f]/n:6.2f}%  {incl[f]:6d}  {f}')
    print('\n## top leaf functions (self; ~after:X = a static function of the stripped binary placed after exported X)\n')
    for k, v in leaf.most_common(60): print(f'{100*v/n:6.2f}%  {v:6d}  {k}')
    print('\n## uncategorized stacks (leaf < callers)\n')
    for k, v in uncatleaf.most_common(25): print(f'{100*v/n:6.2f}%  {v:6d}  {k}')
main()
